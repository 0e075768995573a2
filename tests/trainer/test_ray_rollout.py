"""The rollout engine's Ray placement: an engine that needs GPUs the actor ranks already hold fails at
once, saying what to change, instead of waiting for a bundle that can never be placed."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from services.reward.config import RewardConfig
from services.rollout.config import RolloutConfig
from services.trainer.ray_rollout import RayRolloutEngine

pytestmark = [pytest.mark.integration]


def test_an_engine_without_a_free_gpu_fails_at_once_naming_the_way_out() -> None:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    # two logical GPUs, both held by "actor ranks" (nothing runs on them: no GPU is needed)
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=str(temp))
    try:
        ranks = placement_group([{"CPU": 0.5, "GPU": 1}] * 2, strategy="PACK")
        ray.get(ranks.ready(), timeout=60)
        with pytest.raises(
            RuntimeError, match=r"needs 1 GPU\(s\) beside the actor ranks'.*0 free.*rollout_on_ray=false"
        ):
            RayRolloutEngine("/nonexistent-model", RolloutConfig(), source=None, reward=RewardConfig())
        remove_placement_group(ranks)
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
