"""``mix.offline_weight`` scales the offline responses' term of the policy loss, and nothing else: a
step with weight w equals a step with weight 1 whose offline advantages were multiplied by w."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from services.rollout.samples import RolloutResponse
from services.trainer.group import LocalActorGroup
from services.trainer.update import SequenceTargets
from tests.trainer.actor_steps import UPDATE, advantages, build_world, make_groups, train_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _offline_first(groups):
    """The first response of every group made offline (LUFFY's slot)."""
    out = []
    for g in groups:
        first = g.responses[0]
        offline = RolloutResponse(token_ids=first.token_ids, logprobs=None, text="", finish_reason="offline",
                                  offline=True)  # fmt: skip
        out.append(g.model_copy(update={"responses": [offline, *g.responses[1:]]}))
    return out


def _step(world, config, groups, adv, weight: float) -> dict[str, torch.Tensor]:
    group = LocalActorGroup(config, str(world.model), world.store, config.effective_rollout())
    try:
        group.load_batch(list(world.samples[: len(groups)]), groups)
        old = group.log_probs(temperature=1.0)
        group.update([SequenceTargets(a, o) for a, o in zip(adv, old, strict=True)],
                     **{**UPDATE, "offline_weight": weight})  # fmt: skip
        return {k: v.clone() for k, v in group.state_dict().items()}
    finally:
        group.shutdown()


def test_offline_weight_scales_only_the_offline_term(tmp_path: Path) -> None:
    world = build_world(tmp_path, samples=2)
    config = train_config(world)
    groups = _offline_first(make_groups(world, config.effective_rollout(), [[4, 6], [5, 3]]))
    adv = advantages(groups)
    offline_rows = [0, 2]  # the first response of each of the two groups
    scaled = [a * 3.0 if i in offline_rows else a for i, a in enumerate(adv)]

    weighted = _step(world, config, groups, adv, 3.0)
    by_hand = _step(world, config, groups, scaled, 1.0)
    plain = _step(world, config, groups, adv, 1.0)
    gap = max(float((weighted[k] - by_hand[k]).abs().max()) for k in weighted)
    moved = max(float((weighted[k] - plain[k]).abs().max()) for k in weighted)
    assert gap <= 1e-6 and moved > 1e-3, (gap, moved)
