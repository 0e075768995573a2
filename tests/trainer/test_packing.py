"""Padding-free micro-batches (services/trainer/packing.py): the packing arithmetic by hand; attention
that stays within each packed sequence; and, in every family with videos, images and both, packed
log-probs, entropy and gradients equal to the padded path's, a sequence's log-probs unmoved when
another sequence of its micro-batch changes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from services.trainer import packing
from services.trainer.actor import PolicyModel
from services.trainer.batch import PromptInputs, TokenSequence
from services.trainer.config import ActorConfig
from tests.trainer.test_shared_vision import _prompts


def test_pack_tokens_counts_real_tokens() -> None:
    assert packing.pack_tokens([3, 3, 5, 2], 8) == [[0, 1], [2, 3]]  # 3 + 3 = 6, + 5 > 8; 5 + 2 = 7
    assert packing.pack_tokens([10, 1], 4) == [[0], [1]]  # longer than the budget: alone
    assert packing.pack_tokens([], 4) == []
    assert packing.pack_tokens([4, 4, 4], 8) == [[0, 1], [2]]  # exactly the budget fits


def test_boundaries_and_the_positions_that_score_each_response() -> None:
    assert packing.boundaries([2, 3]).tolist() == [0, 2, 5]
    assert packing.boundaries([2, 3]).dtype == torch.int32  # flash-attention's cu_seqlens
    # row: p p r r | p p p r  (prompts 2 and 3, responses 2 and 1): starts 0 and 4; sequence 0's
    # tokens are predicted at 1, 2; sequence 1's at 4 + 3 - 1 = 6 (no padding slot is scored)
    assert packing.keep_positions([2, 3], [2, 1]).tolist() == [1, 2, 6]
    assert packing.keep_positions([2, 3], [0, 2]).tolist() == [4, 5]  # no response: nothing scored


def _attention_module(kv_groups: int) -> SimpleNamespace:
    return SimpleNamespace(num_key_value_groups=kv_groups, is_causal=True)


@pytest.mark.parametrize("kv_groups", [1, 2])
def test_varlen_attention_is_causal_attention_within_each_sequence(kv_groups: int) -> None:
    gen = torch.Generator().manual_seed(0)
    lengths, heads, dim = [3, 5, 1], 4, 8
    total = sum(lengths)
    query = torch.randn(1, heads, total, dim, generator=gen)
    key = torch.randn(1, heads // kv_groups, total, dim, generator=gen)
    value = torch.randn(1, heads // kv_groups, total, dim, generator=gen)
    cu = packing.boundaries(lengths)
    out, _ = packing.varlen_attention(
        _attention_module(kv_groups), query, key, value, None, scaling=0.5, cu_seq_lens_q=cu, cu_seq_lens_k=cu
    )
    assert out.shape == (1, total, heads, dim)
    start = 0
    for n in lengths:  # each sequence alone, through PyTorch's own causal attention
        k = key[:, :, start : start + n].repeat_interleave(kv_groups, dim=1)
        v = value[:, :, start : start + n].repeat_interleave(kv_groups, dim=1)
        alone = F.scaled_dot_product_attention(
            query[:, :, start : start + n], k, v, is_causal=True, scale=0.5
        )
        torch.testing.assert_close(out[0, start : start + n], alone[0].transpose(0, 1), rtol=0, atol=1e-6)
        start += n
    # the first token of a sequence sees only itself: its output is its own value row
    torch.testing.assert_close(
        out[0, 3], value[0, :, 3].repeat_interleave(kv_groups, dim=0), rtol=0, atol=1e-6
    )


@pytest.mark.parametrize("tower", [False, True])
def test_on_a_gpu_the_varlen_kernel_gets_every_boundary_in_one_call(monkeypatch, tower: bool) -> None:
    """On a GPU in half precision both attentions hand PyTorch's variable-length flash kernel every span
    at once: int32 boundaries, the longest span, causal for the language model and bidirectional
    for the vision tower, (tokens, heads, dim) layouts; the output comes back as (1, T, H, D)."""
    import torch.nn.attention.varlen as varlen

    seen = []

    def kernel(q, k, v, cu_q, cu_k, max_q, max_k, **kwargs):
        seen.append(dict(kwargs, cu_q=cu_q, cu_k=cu_k, max_q=max_q, max_k=max_k, shapes=(q.shape, k.shape)))
        return q  # (T, H, D)

    monkeypatch.setattr(varlen, "varlen_attn", kernel)
    monkeypatch.setattr(packing, "_flash_ready", lambda query, dropout=0.0: True)
    kv_heads = 4 if tower else 2
    query, key = torch.zeros(1, 4, 5, 8), torch.zeros(1, kv_heads, 5, 8)
    cu = packing.boundaries([2, 3])
    attention = packing.vision_attention if tower else packing.varlen_attention
    module = _attention_module(4 // kv_heads)
    out, _ = attention(module, query, key, key, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu, scaling=0.5)
    (call,) = seen
    assert out.shape == (1, 5, 4, 8)
    assert call["cu_q"].dtype == torch.int32 and call["cu_q"].tolist() == [0, 2, 5]
    assert (call["max_q"], call["max_k"], call["scale"]) == (3, 3, 0.5)  # the longest span, worked out
    assert call["window_size"] == ((-1, -1) if tower else (-1, 0))  # bidirectional / causal
    assert call["enable_gqa"] is (not tower)
    assert call["shapes"] == ((5, 4, 8), (5, kv_heads, 8))  # (tokens, heads, dim), as the kernel takes them


def test_the_vision_attention_is_bidirectional_within_each_span_only() -> None:
    generator = torch.Generator().manual_seed(0)
    query, key, value = (torch.randn(1, 2, 7, 4, generator=generator) for _ in range(3))
    cu = packing.boundaries([3, 4])
    out, _ = packing.vision_attention(_attention_module(1), query, key, value, None, cu_seq_lens_q=cu)
    for a, b in ((0, 3), (3, 7)):
        alone = F.scaled_dot_product_attention(query[:, :, a:b], key[:, :, a:b], value[:, :, a:b])
        torch.testing.assert_close(out[0, a:b], alone[0].transpose(0, 1), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="cu_seq_lens_q"):
        packing.vision_attention(_attention_module(1), query, key, value, None)


def test_varlen_attention_refuses_what_it_would_get_wrong() -> None:
    cu = packing.boundaries([2, 2])
    two_rows = torch.zeros(2, 2, 4, 8)
    with pytest.raises(ValueError, match="a packed batch is one row"):
        packing.varlen_attention(_attention_module(1), two_rows, two_rows, two_rows, None, cu_seq_lens_q=cu)
    one_row = torch.zeros(1, 2, 4, 8)
    with pytest.raises(NotImplementedError, match="sliding-window"):
        packing.varlen_attention(
            _attention_module(1), one_row, one_row, one_row, None, cu_seq_lens_q=cu, sliding_window=2
        )


def test_varlen_attention_without_boundaries_is_transformers_sdpa() -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    gen = torch.Generator().manual_seed(1)
    query, key, value = (torch.randn(2, 2, 4, 8, generator=gen) for _ in range(3))
    mask = torch.ones(2, 1, 4, 4, dtype=torch.bool).tril()
    mask[1, :, :, 0] = False  # a padded first token
    expected, _ = sdpa_attention_forward(_attention_module(1), query, key, value, mask)
    got, _ = packing.varlen_attention(_attention_module(1), query, key, value, mask)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"]
# fp32: packed and padded sum the same products in other orders (seen ≤ 5e-7 on log-probs of size ~7)
TOLERANCE = 1e-5


def _score(policy: PolicyModel, sequences: list[TokenSequence]) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Log-probs and entropy (B, R) of one micro-batch holding every sequence, and the gradients of a
    weighted sum of both (every response token and every parameter on the path takes part)."""
    (mb,) = policy.micro_batches(sequences, policy.positions(sequences))
    policy.model.zero_grad(set_to_none=True)
    logp, ent = policy.forward(mb, temperature=0.7, entropy=True)
    weights = torch.linspace(-1.0, 1.0, logp.shape[0]).unsqueeze(-1)
    ((logp + 0.1 * ent) * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.grad is not None}
    return logp.detach(), ent.detach(), grads


@pytest.mark.integration
@pytest.mark.parametrize("family", FAMILIES)
def test_packed_scores_and_gradients_equal_the_padded_path(
    family: str, tmp_path: Path, video_dir: Path
) -> None:
    model_path, (v0, v1, img) = _prompts(family, tmp_path, video_dir)
    padded = PolicyModel(ActorConfig(model_path=str(model_path)), trainable=True, device="cpu")
    packed = PolicyModel(
        ActorConfig(model_path=str(model_path), padding_free=True), trainable=True, device="cpu"
    )
    responses = [[11, 12, 13], [14, 15], [16], [17, 18, 19, 20], [21], [22, 23]]
    cases = {
        "video": [v0, v0, v1, v1, v0, v1],
        "image": [img] * 6,
        "mixed": [v0, img, v1, img, v0, v1],
        "with text": [PromptInputs("text", img.input_ids[:4]), v0, img, v1, v1, img],
    }
    for case, owners in cases.items():
        sequences = [TokenSequence(p, r) for p, r in zip(owners, responses, strict=True)]
        (mb,) = packed.micro_batches(sequences, packed.positions(sequences))
        assert mb.packed and mb.inputs["input_ids"].shape == (1, sum(s.length for s in sequences))
        a_logp, a_ent, a_grads = _score(padded, sequences)
        b_logp, b_ent, b_grads = _score(packed, sequences)
        torch.testing.assert_close(b_logp, a_logp, rtol=0, atol=TOLERANCE, msg=case)
        torch.testing.assert_close(b_ent, a_ent, rtol=0, atol=TOLERANCE, msg=case)
        assert set(a_grads) == set(b_grads), case
        # fp32 sums in another order: 1e-5 of a tensor's largest gradient, and at least 1e-6 of the
        # model's largest (Qwen3.5's A_log gradients are ~1e-5 in all and move ~7e-8 with the layout:
        # its chunked recurrence groups the tokens in other blocks of 64; a leak moves log-probs 1e-4)
        model_scale = max(g.abs().max().item() for g in a_grads.values())
        for name, grad in a_grads.items():
            scale = max(grad.abs().max().item(), model_scale / 10)
            torch.testing.assert_close(b_grads[name], grad, rtol=1e-4, atol=1e-5 * scale, msg=name)


@pytest.mark.integration
@pytest.mark.parametrize("family", FAMILIES)
def test_a_sequence_does_not_see_its_neighbours_in_the_packed_row(
    family: str, tmp_path: Path, video_dir: Path
) -> None:
    model_path, (v0, v1, img) = _prompts(family, tmp_path, video_dir)
    policy = PolicyModel(
        ActorConfig(model_path=str(model_path), padding_free=True), trainable=False, device="cpu"
    )
    owners = [v0, img, v1, v0]
    base = [
        TokenSequence(p, r) for p, r in zip(owners, [[11, 12], [13, 14, 15], [16], [17, 18]], strict=True)
    ]
    changed = list(base)
    changed[1] = TokenSequence(img, [30, 31, 32, 33, 34])  # the second sequence: other and longer
    changed[2] = dataclasses.replace(base[2], response_ids=[40, 41])
    before = policy.log_probs(base)
    after = policy.log_probs(changed)
    for i in (0, 3):  # the untouched sequences, before and after the changed ones in the row
        torch.testing.assert_close(after[i], before[i], rtol=0, atol=1e-6)
    assert (after[1][:3] - before[1]).abs().max() > 1e-3  # the changed one did change
    for i, sequence in enumerate(changed):  # and each scores in the row as it does alone
        torch.testing.assert_close(after[i], policy.log_probs([sequence])[0], rtol=0, atol=1e-5)


@pytest.mark.integration
def test_qwen3_5_linear_attention_would_leak_across_sequences_unsegmented(
    tmp_path: Path, video_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why :func:`packing.segment_linear_attention` exists: without it Qwen3.5's Gated DeltaNet layers
    carry their state from one packed sequence into the next (the check above would fail)."""
    model_path, (v0, _v1, img) = _prompts("qwen3_5", tmp_path, video_dir)
    text = PromptInputs("text", img.input_ids[:4])  # a short one: its tokens sit near the boundary
    row = [TokenSequence(v0, [11, 12]), TokenSequence(text, [13, 14])]
    config = ActorConfig(model_path=str(model_path), padding_free=True)
    segmented = PolicyModel(config, trainable=False, device="cpu")
    alone = segmented.log_probs(row[1:])[0]
    torch.testing.assert_close(segmented.log_probs(row)[1], alone, rtol=0, atol=1e-6)
    monkeypatch.setattr(packing, "segment_linear_attention", lambda model: None)
    unsegmented = PolicyModel(config, trainable=False, device="cpu")
    assert (unsegmented.log_probs(row)[1] - alone).abs().max() > 1e-4


def test_packed_micro_batches_hold_real_tokens_within_the_budget(tmp_path: Path, video_dir: Path) -> None:
    model_path, (v0, v1, img) = _prompts("qwen2_5_vl", tmp_path, video_dir)
    lengths = [len(p.input_ids) for p in (v0, v1, img)]
    budget = lengths[0] + lengths[1] + 8  # v0 and v1 with their responses fit; img does not
    policy = PolicyModel(
        ActorConfig(model_path=str(model_path), padding_free=True, micro_batch_tokens=budget),
        trainable=False,
        device="cpu",
    )
    sequences = [TokenSequence(v0, [1, 2, 3]), TokenSequence(v1, [4]), TokenSequence(img, [5, 6])]
    micro = policy.micro_batches(sequences, policy.positions(sequences))
    assert [mb.indices for mb in micro] == [[0, 1], [2]]
    assert [mb.inputs["input_ids"].shape[1] for mb in micro] == [
        lengths[0] + 3 + lengths[1] + 1,
        lengths[2] + 2,
    ]
    assert micro[0].inputs["cu_seq_lens_q"].tolist() == [0, lengths[0] + 3, lengths[0] + 3 + lengths[1] + 1]


@pytest.mark.integration
@pytest.mark.parametrize("family", FAMILIES)
def test_the_vision_tower_runs_each_layer_in_one_attention_call(
    family: str, tmp_path: Path, video_dir: Path
) -> None:
    """With packing the tower's attention takes every window (Qwen2.5-VL) or clip of a layer in one
    call, and its features are those of transformers' own per-window SDPA path."""
    from transformers import AttentionInterface

    model_path, (v0, v1, _) = _prompts(family, tmp_path, video_dir)
    policy = PolicyModel(ActorConfig(model_path=str(model_path)), trainable=False, device="cpu")
    visual = policy.model.model.visual
    pixels = torch.cat([p.vision["pixel_values_videos"] for p in (v0, v1)])
    grid = torch.cat([p.vision["video_grid_thw"] for p in (v0, v1)])

    def features():
        with torch.no_grad():
            out = visual(pixels, grid_thw=grid)
        return out if isinstance(out, torch.Tensor) else out.pooler_output

    before = features()
    packing.enable_packing(policy.model)
    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs["cu_seq_lens_q"].numel() - 1)
        return packing.vision_attention(*args, **kwargs)

    AttentionInterface.register(packing.VISION_ATTENTION, counted)
    try:
        after = features()
    finally:
        packing.register_attention()
    assert len(calls) == len(visual.blocks)  # one call per layer
    assert max(calls) >= 2  # each call held several spans (two clips at least)
    torch.testing.assert_close(after, before, rtol=0, atol=1e-6)


def test_the_varlen_kernel_is_chosen_only_where_it_runs(monkeypatch) -> None:
    """It needs an Ampere or newer GPU, half precision and no dropout; a V100 or T4 (sm70/75), which
    once fell back to SDPA, must still do."""
    query = SimpleNamespace(is_cuda=True, dtype=torch.bfloat16, device=SimpleNamespace(index=0))
    for capability, ready in (((7, 0), False), ((7, 5), False), ((8, 0), True), ((9, 0), True)):
        packing._flash_capable.cache_clear()
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index, c=capability: c)
        assert packing._flash_ready(query) is ready, capability
    assert not packing._flash_ready(query, dropout=0.1)
    assert not packing._flash_ready(SimpleNamespace(is_cuda=True, dtype=torch.float32, device=query.device))
    assert not packing._flash_ready(torch.zeros(1, dtype=torch.bfloat16))  # the CPU
    packing._flash_capable.cache_clear()
