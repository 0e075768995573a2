"""Entry point of ``reelrl make-tiny-model`` (wired in :mod:`services.cli`)."""

from __future__ import annotations

import sys
from pathlib import Path

from services.common.tiny_models.architectures import get_architecture
from services.common.tiny_models.builder import build_tiny_model


class BadRequest(ValueError):
    """The request cannot be carried out as given (the message is one line for the user)."""


def check_request(family: str, out: Path) -> None:
    """Refuse, before any work, a family without a tiny architecture or an output path that cannot be a
    new checkpoint folder (an existing non-empty folder or file, a path under a file)."""
    try:
        get_architecture(family)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadRequest(f"{out} exists and is not an empty folder; choose a new output path")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise BadRequest(f"{out}: {parent} is a file, so it cannot hold the checkpoint folder")
            break


def check_size(family: str, size: str) -> None:
    """Refuse a size the family does not have, listing the ones it has."""
    from services.common.tiny_models.architectures import REAL_SIZES

    sizes = ["tiny", "real", *REAL_SIZES.get(get_architecture(family).family.name, {})]
    if size not in sizes:
        raise BadRequest(f"no size {size!r} for family {family}; sizes: {', '.join(sizes)}")


def make_tiny_model(
    family: str,
    out: Path,
    seed: int = 0,
    real_tokenizer: bool = False,
    size: str = "tiny",
    tied: bool | None = None,
) -> Path:
    """Write a tiny random-weight checkpoint of ``family`` to ``out`` and return its path.

    ``real_tokenizer`` uses Qwen's real BPE (ids as in real checkpoints, a 151k-row embedding) instead
    of the small BPE trained on the built-in corpus. ``tied``: the LM head shares the input embeddings'
    weight (None: as the size has it).
    """
    return build_tiny_model(family, Path(out), seed=seed, real_tokenizer=real_tokenizer, size=size, tied=tied)


def make_tiny_model_command(
    family: str,
    out: Path,
    seed: int = 0,
    real_tokenizer: bool = False,
    size: str = "tiny",
    tied: bool | None = None,
) -> int:
    """The CLI: the checkpoint path on stdout and 0, or a one-line error on stderr and 2."""
    try:
        check_request(family, out)
        check_size(family, size)
    except BadRequest as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(make_tiny_model(family, out, seed=seed, real_tokenizer=real_tokenizer, size=size, tied=tied))
    return 0
