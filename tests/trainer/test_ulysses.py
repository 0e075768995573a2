"""Ulysses sequence parallelism (services/trainer/ulysses.py): the slicing arithmetic by hand; the
all-to-all attention of two gloo ranks equal to one rank's attention over the whole row, forward and
backward; two ranks with ``actor.ulysses_size: 2`` scoring a packed micro-batch (split unevenly) with the
log-probs, entropy and gradients of one rank without it, in every family it supports; the refusals."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from pydantic import ValidationError

from services.trainer import packing, ulysses
from services.trainer.batch import TokenSequence
from services.trainer.config import ActorConfig
from services.trainer.sequences import rank_shares
from tests.trainer.actor_steps import free_port, spawn_ranks

# fp32; two ranks sum the same products in other orders (the all-to-all moves no value, the
# attention sees the same keys): log-probs ~7 in size agree to ~1e-6
TOLERANCE = 1e-5
RANKS_TIMEOUT_S = 300


def _group(size: int, rank: int) -> ulysses.SequenceParallel:
    return ulysses.SequenceParallel(group=None, size=size, rank=rank)


def test_slices_of_a_row_padded_to_the_group() -> None:
    four = _group(4, 1)
    assert four.padded(10) == 12 and four.padded(12) == 12
    assert four.span(10) == (3, 6)  # slices of 3 in the row padded to 12
    assert four.span(10, rank=3) == (9, 12)  # the last slice holds the padding
    assert _group(2, 0).span(7) == (0, 4) and _group(2, 1).span(7) == (4, 8)


def test_each_rank_scores_the_positions_inside_its_slice() -> None:
    positions = torch.tensor([1, 2, 6, 9])
    mine, counts = _group(2, 0).local_rows(positions, 10)  # slices [0, 5), [5, 10)
    assert mine.tolist() == [True, True, False, False] and counts == [2, 2]
    mine, counts = _group(2, 1).local_rows(positions, 10)
    assert mine.tolist() == [False, False, True, True] and counts == [2, 2]
    # a long prompt: the first slice predicts no response token at all
    mine, counts = _group(2, 0).local_rows(torch.tensor([7, 8]), 9)  # slices [0, 5), [5, 10)
    assert mine.tolist() == [False, False] and counts == [0, 2]


def test_a_sequence_parallel_group_shares_one_data_parallel_share() -> None:
    tokens = [[5, 5], [1, 1], [3, 3], [2]]  # balanced over 2 slots: [[0, 1], [2, 3, 4, 5, 6]]
    assert rank_shares(tokens, 4, ulysses_size=2) == [[0, 1], [0, 1], [2, 3, 4, 5, 6], [2, 3, 4, 5, 6]]
    assert rank_shares(tokens, 2) == [[0, 1], [2, 3, 4, 5, 6]]
    assert ulysses.data_parallel(5, 8, 2) == (2, 4) and ulysses.data_parallel(1, 2, 1) == (1, 2)


def test_the_config_refuses_what_cannot_split() -> None:
    base = {"model_path": "m", "padding_free": True}
    assert ActorConfig(**base, world_size=4, ulysses_size=2).ulysses_size == 2
    with pytest.raises(ValidationError, match=r"must divide actor\.world_size=3"):
        ActorConfig(**base, world_size=3, ulysses_size=2)
    with pytest.raises(ValidationError, match=r"set actor\.padding_free: true"):
        ActorConfig(model_path="m", world_size=2, ulysses_size=2)
    with pytest.raises(ValidationError):
        ActorConfig(**base, world_size=6, ulysses_size=3)  # 1, 2, 4 or 8


def _model(heads: int, kv: int, *layers: str) -> SimpleNamespace:
    modules = [type(name, (), {})() for name in layers]
    text = SimpleNamespace(num_attention_heads=heads, num_key_value_heads=kv)
    return SimpleNamespace(config=SimpleNamespace(text_config=text), modules=lambda: modules)


def test_a_model_whose_heads_do_not_split_is_refused_with_the_fix() -> None:
    ulysses.check_model(_model(28, 4), 4)  # Qwen2.5-VL-7B: 7 heads and 1 KV head a rank
    ulysses.check_model(_model(28, 4), 2)
    ulysses.check_model(_model(16, 2), 4)  # 3B: 2 KV heads, each repeated for 2 ranks
    with pytest.raises(ValueError, match="28 attention heads do not divide among 8 ranks"):
        ulysses.check_model(_model(28, 4), 8)
    with pytest.raises(ValueError, match="6 KV heads are neither"):
        ulysses.check_model(_model(24, 6), 4)
    with pytest.raises(ValueError, match=r"linear-attention layers .*Qwen3_5GatedDeltaNet"):
        ulysses.check_model(_model(16, 2, "Qwen3_5GatedDeltaNet"), 2)


# -- two gloo ranks ---------------------------------------------------------------------------------


def _init(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=120))


def _attention_inputs() -> tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    lengths = [4, 2, 3]  # 9 tokens: slices of 5, the second with one padding token
    total, heads, kv_heads, dim = sum(lengths), 4, 1, 8
    return (
        lengths,
        torch.randn(1, heads, total, dim, generator=gen),
        torch.randn(1, kv_heads, total, dim, generator=gen),
        torch.randn(1, kv_heads, total, dim, generator=gen),
    )


def _attention_rank(rank: int, port: int, folder: Path) -> None:
    """This rank's slice of q, k, v through the all-to-all attention; its output slice and the gradients
    of its slice of the inputs under a fixed weighting of the whole output."""
    _init(rank, port)
    try:
        (sp,) = [g for g in [ulysses.new_group(2)] if g is not None]
        lengths, query, key, value = _attention_inputs()
        total = sum(lengths)
        start, stop = sp.span(total)
        kwargs: dict = {"cu_seq_lens_q": packing.boundaries(lengths)}
        kwargs["cu_seq_lens_k"] = kwargs["cu_seq_lens_q"]
        ulysses._extend_boundaries(kwargs, total, sp.padded(total) - total)
        parts = []
        for t in (query, key, value):
            padded = F.pad(t, (0, 0, 0, sp.padded(total) - total))
            parts.append(padded[:, :, start:stop].clone().requires_grad_(True))
        out, _ = packing.varlen_attention(
            SimpleNamespace(num_key_value_groups=4), *parts, None, scaling=0.5, **kwargs, ulysses=sp
        )
        weights = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
        (out * weights).sum().backward()
        torch.save({"out": out.detach(), "grads": [p.grad for p in parts]}, out_path(folder, rank))
    finally:
        dist.destroy_process_group()


def out_path(out_dir: Path, rank: int) -> Path:
    return out_dir / f"rank{rank}.pt"


@pytest.mark.integration
def test_all_to_all_attention_is_attention_over_the_whole_row(tmp_path: Path) -> None:
    spawn_ranks(_attention_rank, (free_port(), tmp_path), 2, RANKS_TIMEOUT_S, "the attention ranks")
    lengths, query, key, value = _attention_inputs()
    total = sum(lengths)
    leaves = [t.clone().requires_grad_(True) for t in (query, key, value)]
    cu = packing.boundaries(lengths)
    whole, _ = packing.varlen_attention(
        SimpleNamespace(num_key_value_groups=4),
        *leaves,
        None,
        scaling=0.5,
        cu_seq_lens_q=cu,
        cu_seq_lens_k=cu,
    )
    ranks = [torch.load(out_path(tmp_path, r)) for r in range(2)]
    joined = torch.cat([r["out"] for r in ranks], dim=1)[:, :total]  # (1, T, H, D), padding dropped
    torch.testing.assert_close(joined, whole, rtol=0, atol=1e-6)
    # the same weighting of the whole output, as each rank applied it to its slice
    padded_total = 2 * ranks[0]["out"].shape[1]
    weights = torch.linspace(-1, 1, ranks[0]["out"].numel()).reshape(ranks[0]["out"].shape)
    pad = padded_total - total
    full_weights = torch.cat([weights, weights], dim=1)[:, :total]
    (whole * full_weights).sum().backward()
    for i, leaf in enumerate(leaves):
        grads = torch.cat([r["grads"][i] for r in ranks], dim=2)[:, :, :total]
        torch.testing.assert_close(grads, leaf.grad, rtol=0, atol=1e-6)
        assert pad == 1 and torch.isfinite(torch.cat([r["grads"][i] for r in ranks], dim=2)).all()


# -- the policy: two ranks with ulysses_size 2 against one ----------------------------------------

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]
RESPONSES = [[11, 12, 13], [14, 15], [16], [17, 18, 19, 20], [21], [22, 23, 24]]


def _sequences(prompts: list) -> list[TokenSequence]:
    v0, v1, img = prompts
    owners = [v0, img, v1, img, v0, v1]  # videos and images in one row
    sequences = [TokenSequence(p, r) for p, r in zip(owners, RESPONSES, strict=True)]
    if sum(s.length for s in sequences) % 2 == 0:  # an odd row: the two slices differ, one pads
        sequences[-1] = TokenSequence(v1, [*RESPONSES[-1], 25])
    return sequences


def _score(model_path: Path, prompts: list, world: int, ulysses_size: int) -> dict:
    """One packed micro-batch of every sequence: log-probs, entropy and the full gradients of a weighted
    sum of both (multiplied by the world, as the update's loss is: FSDP averages over the ranks)."""
    from services.trainer.actor import PolicyModel

    config = ActorConfig(
        model_path=str(model_path), padding_free=True, world_size=world, ulysses_size=ulysses_size
    )
    policy = PolicyModel(config, trainable=True, device="cpu")
    sequences = _sequences(prompts)
    (mb,) = policy.micro_batches(sequences, policy.positions(sequences))
    seen: list[int] = []  # how many tokens the language model's layers ran on
    language = policy.model.model.language_model
    handle = language.register_forward_hook(lambda m, a, out: seen.append(out.last_hidden_state.shape[1]))
    logp, ent = policy.forward(mb, temperature=0.7, entropy=True)
    handle.remove()
    weights = torch.linspace(-1.0, 1.0, logp.shape[0]).unsqueeze(-1)
    ((logp + 0.1 * ent) * weights).sum().mul(world).backward()
    grads = {}
    for name, p in policy.model.named_parameters():
        if p.grad is not None:
            grad = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            grads[name] = grad.detach().clone()
    return {
        "logp": logp.detach(),
        "ent": ent.detach(),
        "grads": grads,
        "length": mb.inputs["input_ids"].shape[1],
        "seen": seen,
    }


def _policy_rank(rank: int, port: int, cases: dict[str, tuple[Path, list]], out: Path) -> None:
    _init(rank, port)
    try:
        for family, (model_path, prompts) in cases.items():
            result = _score(model_path, prompts, world=2, ulysses_size=2)
            torch.save(result, out / f"{family}-rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def split_scores(tmp_path_factory: pytest.TempPathFactory, video_dir: Path) -> dict[str, tuple[dict, list]]:
    from tests.trainer.test_shared_vision import _prompts

    root = tmp_path_factory.mktemp("ulysses")
    cases = {family: _prompts(family, root / family, video_dir) for family in FAMILIES}
    one = {
        family: _score(path, prompts, world=1, ulysses_size=1) for family, (path, prompts) in cases.items()
    }
    out = root / "ranks"
    out.mkdir()
    spawn_ranks(_policy_rank, (free_port(), cases, out), 2, RANKS_TIMEOUT_S, "the Ulysses ranks")
    return {f: (one[f], [torch.load(out / f"{f}-rank{r}.pt") for r in range(2)]) for f in FAMILIES}


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("family", FAMILIES)
def test_two_ranks_splitting_the_row_score_like_one(split_scores: dict, family: str) -> None:
    one, (rank0, rank1) = split_scores[family]
    assert one["length"] % 2 == 1  # the row splits unevenly: the second slice ends in padding
    half = (one["length"] + 1) // 2
    assert one["seen"] == [one["length"]] and rank0["seen"] == rank1["seen"] == [half]
    for rank in (rank0, rank1):  # both ranks hold the whole micro-batch's scores
        torch.testing.assert_close(rank["logp"], one["logp"], rtol=0, atol=TOLERANCE)
        torch.testing.assert_close(rank["ent"], one["ent"], rtol=0, atol=TOLERANCE)
    assert set(rank0["grads"]) == set(one["grads"])
    model_scale = max(g.abs().max().item() for g in one["grads"].values())
    for name, grad in one["grads"].items():
        scale = max(grad.abs().max().item(), model_scale / 10)
        torch.testing.assert_close(rank0["grads"][name], grad, rtol=1e-4, atol=1e-5 * scale, msg=name)


# -- a whole step: 2 ranks (one group of 2) and 4 ranks (2 data-parallel groups of 2) against one ----


@pytest.fixture(scope="module")
def split_steps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """One on-policy step (old log-probs, then the update) of the same groups: on one rank, packed; on
    2 and 4 ranks with ``ulysses_size: 2``. Returns each run's per-rank results, the single rank's first."""
    from tests.trainer.actor_steps import build_world, fsdp_rank, make_groups, run_step, train_config

    root = tmp_path_factory.mktemp("ulysses-steps")
    world = build_world(root, samples=3)
    rollout = train_config(world).effective_rollout()
    groups = make_groups(world, rollout, [[5, 9], [7, 3], [4, 6]])
    results = {"one": [run_step(world, train_config(world, padding_free=True), groups)]}
    for ranks in (2, 4):
        split = {"padding_free": True, "world_size": ranks, "ulysses_size": 2}
        cases = {"step": (train_config(world, **split), groups)}
        if ranks == 2:  # a checkpointed layer recomputes its all-to-alls in the backward
            cases["checkpointed"] = (train_config(world, **split, gradient_checkpointing=True), groups)
        out = root / f"ranks{ranks}"
        out.mkdir()
        spawn_ranks(
            fsdp_rank,
            (ranks, free_port(), world, cases, out),
            ranks,
            RANKS_TIMEOUT_S,
            f"{ranks} Ulysses ranks",
        )
        for name in cases:
            results[f"{name}{ranks}"] = [torch.load(out / f"{name}-rank{r}.pt") for r in range(ranks)]
    return results


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("run", ["step2", "step4", "checkpointed2"])
def test_a_step_split_over_ranks_updates_like_one_rank(split_steps: dict, run: str) -> None:
    (one,) = split_steps["one"]
    split = split_steps[run]
    ranks = len(split)
    moved = max(float((one["final"][k] - one["initial"][k]).abs().max()) for k in one["final"])
    assert moved > 100 * TOLERANCE  # the step moved the weights
    gap = max(float((split[0]["final"][k] - one["final"][k]).abs().max()) for k in one["final"])
    assert gap <= TOLERANCE
    # the two ranks of a group hold the same share; the groups' shares cover the step once
    shares = [r["share"] for r in split]
    assert all(shares[i] == shares[i + 1] for i in range(0, ranks, 2))
    assert sorted(i for s in shares[::2] for i in s) == list(range(len(one["old"])))
    for rank in split:
        for i, old in zip(rank["share"], rank["old"], strict=True):
            torch.testing.assert_close(old, one["old"][i], rtol=0, atol=TOLERANCE)
        assert rank["metrics"]["grad_norm"] == pytest.approx(one["metrics"]["grad_norm"], rel=TOLERANCE)
    # each group's loss share, counted once per group, adds up to the single rank's loss
    pg_loss = sum(r["metrics"]["pg_loss"] for r in split[::2])
    assert pg_loss == pytest.approx(one["metrics"]["pg_loss"], abs=TOLERANCE)


@pytest.mark.slow
@pytest.mark.integration
def test_ray_ranks_splitting_rows_report_one_step_like_one_process(tmp_path: Path) -> None:
    """Through the Ray group the driver uses: both ranks of the one sequence-parallel group hold every
    sequence, the log-probs come back once each, and the update's loss is counted once, not per rank."""
    from services.trainer.group import LocalActorGroup
    from services.trainer.ray_group import RayActorGroup
    from services.trainer.update import SequenceTargets
    from tests.trainer.actor_steps import UPDATE, advantages, build_world, make_groups, train_config

    world = build_world(tmp_path, samples=3)
    config = train_config(world, padding_free=True, world_size=2, ulysses_size=2)
    rollout = config.effective_rollout()
    samples, groups = list(world.samples), make_groups(world, rollout, [[6, 4], [7, 3], [5, 5]])
    adv = advantages(groups)
    single = train_config(world, padding_free=True)
    local = LocalActorGroup(single, str(world.model), world.store, rollout)
    try:
        local.load_batch(samples, groups)
        old = local.log_probs(temperature=1.0)
        first = local.update([SequenceTargets(a, o) for a, o in zip(adv, old, strict=True)], **UPDATE)
        after = local.state_dict()
    finally:
        local.shutdown()
    group = RayActorGroup(config, str(world.model), world.frames, rollout)
    try:
        assert group.load_batch(samples, groups) == 6  # the step's sequences, once
        assert group.shares == [list(range(6))] * 2  # each rank of the group holds all of them
        ray_old = group.log_probs(temperature=1.0)
        assert len(ray_old) == 6
        for a, b in zip(ray_old, old, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=TOLERANCE)
        metrics = group.update([SequenceTargets(a, o) for a, o in zip(adv, ray_old, strict=True)], **UPDATE)
        assert metrics["pg_loss"] == pytest.approx(first["pg_loss"], abs=TOLERANCE)
        assert metrics["grad_norm"] == pytest.approx(first["grad_norm"], rel=TOLERANCE)
        state = group.state_dict()
        assert max(float((state[k] - after[k]).abs().max()) for k in after) <= TOLERANCE
    finally:
        group.shutdown()
