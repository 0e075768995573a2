"""FSDP2: two ranks (spawned processes, gloo) make the same update as one rank on the same global batch,
also when they hold different numbers of micro-batches (the short rank runs dummy forwards that change
nothing instead of leaving the other waiting), and when one rank holds only images (or only text) and
the other only videos (zero-weight vision passes keep them in step), and the first update of a step is
on-policy (ratio 1); with bf16 compute over fp32 master weights they agree to bf16's resolution."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch

from services.trainer.sequences import balanced_shares, shard
from tests.trainer.actor_steps import (
    build_world,
    free_port,
    fsdp_rank,
    in_step_order,
    make_groups,
    run_step,
    spawn_ranks,
    train_config,
    with_modalities,
)

TOLERANCE = 1e-5
RANKS_TIMEOUT_S = 300.0


def test_balanced_shares_give_whole_groups_to_ranks_by_tokens() -> None:
    # the docstring's example, worked by hand: weights 10, 2, 6, 2; group 0 → rank 0 (10), group 2 →
    # rank 1 (6), group 1 → rank 1 (8), group 3 → rank 1 (10)
    assert balanced_shares([[5, 5], [1, 1], [3, 3], [2]], 2) == [[0, 1], [2, 3, 4, 5, 6]]
    # one long video prompt against three short ones: contiguous halves would give rank 0 all but one
    # short group's tokens (3,000 + 100 against 100 + 100); by tokens rank 0 takes the long one alone
    tokens = [[1500, 1500], [50, 50], [50, 50], [50, 50]]
    assert balanced_shares(tokens, 2) == [[0, 1], [2, 3, 4, 5, 6, 7]]
    assert [list(shard(8, r, 2)) for r in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # ties go to the lower rank, in group order
    assert balanced_shares([[1], [1], [1], [1]], 2) == [[0, 2], [1, 3]]
    assert balanced_shares([[4, 4]], 1) == [[0, 1]]
    # fewer groups than ranks: contiguous counts, groups cut (every rank must hold a sequence)
    assert balanced_shares([[9, 9, 9, 9]], 2) == [[0, 1], [2, 3]]
    # an empty group is no group: two groups, one empty, on two ranks → contiguous
    assert balanced_shares([[10, 10], []], 2) == [[0], [1]]
    # a rank below the update's mini-batches (every rank must step as often): contiguous instead
    uneven = [[3000, 3000], [1000, 1000], [1000, 1000], [1000, 1000]]
    assert balanced_shares(uneven, 2) == [[0, 1], [2, 3, 4, 5, 6, 7]]
    assert balanced_shares(uneven, 2, min_count=4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # every sequence exactly once, every rank at least one, for many shapes
    for world in (1, 2, 3, 4):
        for shape in ([3, 1, 4], [1] * 7, [8], [2, 2, 2, 2, 2]):
            tokens = [[10 * g + j + 1 for j in range(n)] for g, n in enumerate(shape)]
            shares = balanced_shares(tokens, world)
            assert sorted(i for share in shares for i in share) == list(range(sum(shape)))
            assert all(share == sorted(share) for share in shares)
            if sum(shape) >= world:
                assert all(shares), (world, shape)


@dataclass
class Steps:
    single: dict[str, dict[str, Any]]  # case → run_step result of the one rank
    ranks: dict[str, list[dict[str, Any]]]  # case → run_step result per FSDP rank


@pytest.fixture(scope="module")
def steps(tmp_path_factory: pytest.TempPathFactory) -> Steps:
    root = tmp_path_factory.mktemp("fsdp")
    world = build_world(root, samples=3)
    rollout = train_config(world).effective_rollout()
    even = make_groups(world, rollout, [[5, 9], [7, 3]])
    uneven = make_groups(world, rollout, [[2, 12], [6, 6], [6, 6]])
    prompt = len(uneven[0].prompt_token_ids)  # every sample's prompt has this length
    # Shares: rank 0 (P+2, P+12, P+6), rank 1 (P+6) x 3. With room for 3 x (P+6) tokens, rank 1 packs
    # one micro-batch and rank 0 two (its third sequence would pad to 3 x (P+12)).
    budget = 3 * (prompt + 6) + 1
    # Joint image-video batches: rank 0 holds only the image questions, rank 1 only the video ones
    # (then only a text question vs a video one); one rank holds both in one micro-batch.
    modal = with_modalities(world).samples
    images_videos = list(modal[:4])
    text_video = [modal[4], modal[2]]
    cases = {
        "even": (train_config(world), even),
        "uneven": (train_config(world, micro_batch_tokens=budget), uneven),
        "images_videos": (
            train_config(world),
            make_groups(world, rollout, [[3, 5], [4, 6], [5, 9], [7, 3]], images_videos),
            images_videos,
        ),
        "text_video": (
            train_config(world),
            make_groups(world, rollout, [[4, 6], [5, 3]], text_video),
            text_video,
        ),
        # fp32 master, bf16 forwards: autocast on one rank, FSDP's MixedPrecisionPolicy on two
        "bf16": (train_config(world, compute_dtype="bfloat16"), even),
        # padding-free rows (services/trainer/packing.py): the same update as padded, on 1 and 2 ranks,
        # with images and videos, and with checkpointed layers recomputed in the backward
        "packed": (train_config(world, padding_free=True), even),
        "packed_images_videos": (
            train_config(world, padding_free=True),
            make_groups(world, rollout, [[3, 5], [4, 6], [5, 9], [7, 3]], images_videos),
            images_videos,
        ),
        "packed_checkpointed": (train_config(world, padding_free=True, gradient_checkpointing=True), even),
        # the shards on the host, each unit copied in for its pass, AdamW stepping on the host
        # (services/trainer/offload.py; FSDP2's CPUOffloadPolicy); the moments parked between steps
        "offloaded": (train_config(world, offload_params=True, offload_optimizer=True, world_size=2), even),
    }
    single = {name: run_step(world, *case) for name, case in cases.items()}
    out = root / "ranks"
    out.mkdir()
    spawn_ranks(fsdp_rank, (2, free_port(), world, cases, out), 2, RANKS_TIMEOUT_S, "the FSDP ranks")
    ranks = {name: [torch.load(out / f"{name}-rank{r}.pt") for r in range(2)] for name in cases}
    return Steps(single=single, ranks=ranks)


def largest_gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize(
    "case",
    [
        "even",
        "uneven",
        "images_videos",
        "text_video",
        "packed",
        "packed_images_videos",
        "packed_checkpointed",
        "offloaded",
    ],
)
def test_two_ranks_update_like_one(steps: Steps, case: str) -> None:
    one, (rank0, rank1) = steps.single[case], steps.ranks[case]
    assert rank1["final"] == {}  # the full weights are gathered on rank 0 only
    assert largest_gap(one["final"], one["initial"]) > 100 * TOLERANCE  # the step moved the weights
    assert largest_gap(rank0["final"], one["final"]) <= TOLERANCE
    # the old log-probs of the step, put back in its order from the shares the ranks held
    old = in_step_order(rank0, rank1)
    assert [t.shape for t in old] == [t.shape for t in one["old"]]
    assert max(float((a - b).abs().max()) for a, b in zip(old, one["old"], strict=True)) <= TOLERANCE
    # the same gradient: the global norm (before clipping) and the loss, whose shares add up over ranks
    grad_norm = one["metrics"]["grad_norm"]
    assert rank0["metrics"]["grad_norm"] == pytest.approx(grad_norm, rel=TOLERANCE)
    assert rank1["metrics"]["grad_norm"] == pytest.approx(grad_norm, rel=TOLERANCE)
    pg_loss = rank0["metrics"]["pg_loss"] + rank1["metrics"]["pg_loss"]
    assert pg_loss == pytest.approx(one["metrics"]["pg_loss"], abs=TOLERANCE)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize(
    ("packed", "padded"),
    [("packed", "even"), ("packed_images_videos", "images_videos"), ("packed_checkpointed", "even")],
)
def test_packed_rows_update_like_padded_ones(steps: Steps, packed: str, padded: str) -> None:
    """Padding-free packing changes the layout, not the update: the same weights after the step, the
    same old log-probs, loss and gradient norm (fp32, TOLERANCE), on one rank and on two."""
    one, other = steps.single[packed], steps.single[padded]
    assert largest_gap(one["final"], other["final"]) <= TOLERANCE
    assert max(float((a - b).abs().max()) for a, b in zip(one["old"], other["old"], strict=True)) <= TOLERANCE
    assert one["metrics"]["grad_norm"] == pytest.approx(other["metrics"]["grad_norm"], rel=TOLERANCE)
    assert one["metrics"]["pg_loss"] == pytest.approx(other["metrics"]["pg_loss"], abs=TOLERANCE)
    assert largest_gap(steps.ranks[packed][0]["final"], other["final"]) <= TOLERANCE


@pytest.mark.slow
@pytest.mark.integration
def test_uneven_ranks_run_equally_many_forwards(steps: Steps) -> None:
    rank0, rank1 = steps.ranks["uneven"]
    assert sorted((rank0["micro_batches"], rank1["micro_batches"])) == [1, 2]
    # the rank with one micro-batch ran one dummy forward (and backward) so that the other's second one
    # could gather parameters; the equal weights above show it changed nothing
    assert (rank0["forwards"], rank1["forwards"]) == (2, 2)
    assert steps.single["uneven"]["micro_batches"] == 3


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("case", ["even", "uneven", "images_videos", "text_video", "bf16"])
def test_first_update_is_on_policy(steps: Steps, case: str) -> None:
    """Old log-probs from their own no-grad pass; the update's forward must reproduce them: ratio 1."""
    for metrics in [steps.single[case]["metrics"]] + [r["metrics"] for r in steps.ranks[case]]:
        assert metrics["ppo_kl"] == pytest.approx(0.0, abs=1e-7)
        assert metrics["clipfrac_higher"] == 0.0
        assert metrics["clipfrac_lower"] == 0.0


@pytest.mark.slow
@pytest.mark.integration
def test_two_bf16_ranks_update_like_one(steps: Steps) -> None:
    """fp32 master, bf16 compute: one rank autocasts, two all-gather bf16 weights (FSDP2's
    MixedPrecisionPolicy) and reduce-scatter fp32 gradients. The two round differently (autocast keeps
    embeddings and norms in fp32), so they agree to bf16's resolution, not to fp32's."""
    one, (rank0, rank1) = steps.single["bf16"], steps.ranks["bf16"]
    assert {v.dtype for v in rank0["final"].values() if v.is_floating_point()} == {torch.float32}
    moved = largest_gap(one["final"], one["initial"])
    assert largest_gap(rank0["final"], one["final"]) <= 0.02 * moved
    old = in_step_order(rank0, rank1)
    assert max(float((a - b).abs().max()) for a, b in zip(old, one["old"], strict=True)) <= 0.02
    grad_norm = one["metrics"]["grad_norm"]
    assert rank0["metrics"]["grad_norm"] == pytest.approx(grad_norm, rel=0.01)
    pg_loss = rank0["metrics"]["pg_loss"] + rank1["metrics"]["pg_loss"]
    assert pg_loss == pytest.approx(one["metrics"]["pg_loss"], abs=1e-3)
