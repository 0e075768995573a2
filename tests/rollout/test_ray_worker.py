"""The rollout worker as a Ray actor: rollouts and weight pushes across the actor boundary, and a
clean shutdown (no shared-memory segment or temp folder left behind by an engine whose core and worker
are processes of their own)."""

from __future__ import annotations

import copy
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import torch

from services.rollout.samples import RolloutResponse
from services.rollout.weight_sync import safetensors_bytes

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.twin]
FAMILY = "qwen3_vl"
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def ray_session():
    import ray

    # A short private folder: Ray's socket paths must stay under the 107-character AF_UNIX limit.
    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=str(temp))
    yield ray
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


def maps_any(process: psutil.Process, segments: set[Path]) -> bool:
    try:
        maps = Path(f"/proc/{process.pid}/maps").read_text()
    except OSError:
        return False
    return any(str(segment) in maps for segment in segments)


def gap(expected: torch.Tensor, got: list[float]) -> float:
    return (expected - torch.tensor(got)).abs().max().item()


def test_rollout_worker_actor(
    ray_session, tiny_models, clips, video_sample, hf_model, hf_logprobs, make_config, shm_segments
):
    from services.rollout.checkpoint import Checkpoint
    from services.rollout.worker import rollout_actor_class

    ray = ray_session
    before = shm_segments()
    processes_before = {p.pid for p in psutil.Process().children(recursive=True)}
    # an engine with processes of its own, as on a GPU (on the CPU the actor would hold its core and
    # worker in-process, with no segment to leave behind: tests/rollout/test_fleet_ray.py)
    config = make_config(engine={**make_config().engine.model_dump(), "in_process": False})
    actor = rollout_actor_class(num_cpus=1).remote(
        str(tiny_models[FAMILY]), config.model_dump(), str(clips.store.root)
    )
    # what hf_logprobs needs of an engine, on this side of the actor boundary
    local = SimpleNamespace(
        checkpoint=Checkpoint.load(tiny_models[FAMILY]), source=clips.store, config=config
    )
    try:
        info = ray.get(actor.info.remote(), timeout=300)
        segments = shm_segments() - before
        # the processes this test started that map the engine's segments (the actor's worker, its
        # engine core and vLLM workers), not Ray's idle pool
        holders = [
            p for p in psutil.Process().children(recursive=True)
            if p.pid not in processes_before and maps_any(p, segments)
        ]  # fmt: skip
        # and their children: the resource tracker that unlinks what a killed process left is one
        holders += [child for p in holders for child in p.children(recursive=True) if child not in holders]
        assert info["family"] == FAMILY and info["weight_version"] == 0
        sample = video_sample(FAMILY, "wide", "ray-1")

        (group,) = ray.get(actor.rollout.remote([sample.model_dump()], temperature=0.0, n=1))
        assert group["sample_id"] == "ray-1"
        greedy = RolloutResponse.model_validate(group["responses"][0])
        assert greedy.weight_versions == ((0, 0),)
        old = hf_model(tiny_models[FAMILY])
        assert gap(hf_logprobs(local, old, sample, greedy.token_ids), greedy.logprobs) < TOLERANCE

        new = copy.deepcopy(old)
        with torch.no_grad():
            for p in new.parameters():
                p.mul_(-1.0)  # a different model for sure; same shapes
        ray.get(actor.push_weights.remote(safetensors_bytes(new.state_dict())))
        (group,) = ray.get(actor.rollout.remote([sample.model_dump()], temperature=0.0, n=1))
        changed = RolloutResponse.model_validate(group["responses"][0])
        # the pushed weights produced these tokens, and the response says so
        assert gap(hf_logprobs(local, new, sample, changed.token_ids), changed.logprobs) < TOLERANCE
        assert changed.weight_versions == ((0, 1),)

        ray.get(actor.push_weights.remote(safetensors_bytes(old.state_dict())))
        (group,) = ray.get(actor.rollout.remote([sample.model_dump()], temperature=0.0, n=1))
        again = RolloutResponse.model_validate(group["responses"][0])
        assert again.token_ids == greedy.token_ids
        assert gap(torch.tensor(greedy.logprobs), again.logprobs) < TOLERANCE
        assert again.weight_versions == ((0, 2),)
    finally:
        ray.get(actor.shutdown.remote(), timeout=120)
        ray.kill(actor)
    # Unlinking is the exiting processes' last act (or their resource tracker's, after a kill): judge
    # once every process the engine ran is gone.
    assert holders, "no process of this test maps the engine's segments"
    _, alive = psutil.wait_procs(holders, timeout=120)
    assert not alive, f"the actor's processes outlived its shutdown: {alive}"
    assert segments, "the actor's engine maps no shared-memory segment: the check would see nothing"
    assert not {path for path in segments if path.exists()}, "the actor's engine left shared-memory segments"
    assert not Path(info["temp_folder"]).exists()
