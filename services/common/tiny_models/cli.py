"""Entry point of ``reelrl make-tiny-model`` (wired in :mod:`services.cli`)."""

from __future__ import annotations

from pathlib import Path

from services.common.tiny_models.builder import build_tiny_model


def make_tiny_model(family: str, out: Path, seed: int = 0, real_tokenizer: bool = False) -> Path:
    """Write a tiny random-weight checkpoint of ``family`` to ``out`` and return its path.

    ``real_tokenizer`` uses Qwen's real BPE (ids as in real checkpoints, a 151k-row embedding) instead
    of the small BPE trained on the built-in corpus.
    """
    return build_tiny_model(family, Path(out), seed=seed, real_tokenizer=real_tokenizer)
