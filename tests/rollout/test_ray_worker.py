"""The rollout worker as a Ray actor: rollouts and weight pushes across the actor boundary, and a
clean shutdown (no shared-memory segment or temp folder left behind)."""

from __future__ import annotations

import copy
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from services.rollout.weight_sync import safetensors_bytes

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FAMILY = "qwen3_vl"


@pytest.fixture(scope="module")
def ray_session():
    import ray

    # A short private folder: Ray's socket paths must stay under the 107-character AF_UNIX limit.
    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=str(temp))
    yield ray
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


def test_rollout_worker_actor(
    ray_session, tiny_models, clips, video_sample, hf_model, make_config, shm_segments
):
    from services.rollout.worker import rollout_actor_class

    ray = ray_session
    before = shm_segments()
    actor = rollout_actor_class(num_cpus=1).remote(
        str(tiny_models[FAMILY]), make_config().model_dump(), str(clips.store.root)
    )
    try:
        info = ray.get(actor.info.remote(), timeout=300)
        segments = shm_segments() - before
        assert info["family"] == FAMILY
        sample = video_sample(FAMILY, "wide", "ray-1").model_dump()

        (group,) = ray.get(actor.rollout.remote([sample], temperature=0.0, n=1))
        assert group["sample_id"] == "ray-1"
        greedy = group["responses"][0]
        assert len(greedy["token_ids"]) == len(greedy["logprobs"]) > 0

        old = hf_model(tiny_models[FAMILY])
        new = copy.deepcopy(old)
        with torch.no_grad():
            for p in new.parameters():
                p.mul_(-1.0)  # a different model for sure; same shapes
        ray.get(actor.push_weights.remote(safetensors_bytes(new.state_dict())))
        changed = ray.get(actor.rollout.remote([sample], temperature=0.0, n=1))[0]["responses"][0]
        assert changed["logprobs"] != greedy["logprobs"]

        ray.get(actor.push_weights.remote(safetensors_bytes(old.state_dict())))
        again = ray.get(actor.rollout.remote([sample], temperature=0.0, n=1))[0]["responses"][0]
        assert again["token_ids"] == greedy["token_ids"]
        assert max(abs(a - b) for a, b in zip(again["logprobs"], greedy["logprobs"], strict=True)) < 1e-5
    finally:
        ray.get(actor.shutdown.remote(), timeout=120)
        ray.kill(actor)
    assert not segments & shm_segments(), "the actor's engine left shared-memory segments"
    assert not Path(info["temp_folder"]).exists()
