"""The rollout worker as a Ray actor: a :class:`RolloutEngine` that the trainer drives remotely.

vLLM runs inside the actor with its default executor (vLLM's own Ray executor is refused on CPU).
Only sample dicts with frame-store keys go in and response groups come out; new weights arrive as
safetensors bytes (through Ray's object store), as a path on a filesystem the actor can read, or
bucket by bucket (object references to the actor ranks' buckets).
Call ``shutdown`` before killing the actor: a killed engine leaks its shared-memory segment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from services.rollout.config import RolloutConfig, in_process_resolved
from services.rollout.engine import RolloutEngine
from services.rollout.environment import pin_here
from services.rollout.samples import RolloutSample
from services.rollout.vllm_bridge import on_cpu


def engine_threads(
    pinned: list[int] | None, slot: tuple[int, int] | None, cores: int, cap: int | None = None
) -> int:
    """Threads an in-process CPU engine in an actor computes with: the cores it is pinned to; with a
    slot it could not be pinned to (fewer ``cores`` than engines), its part of them; alone, all; never
    more than ``cap`` (an engine generating beside the update: its bundle's CPUs)."""
    if pinned:
        threads = len(pinned)
    elif slot is not None:
        threads = max(1, cores // slot[1])
    else:
        threads = max(1, cores)
    return min(threads, cap) if cap else threads


class RolloutWorker:
    """``source``: a frame source to read from instead of the store at ``frame_root`` (e.g. the
    trainer's store plus its still images, or a realtime decoder); ``reward``: the reward client's
    config (a ``RewardConfig`` dict) for mix-policy gates, built inside the actor. On vLLM's CPU backend
    (tensor parallel 1) the engine's core and worker run in the actor's process unless
    ``engine.in_process`` says otherwise. ``cpu_slot``:
    (index, count) of a fleet of engines sharing this host's cores: on vLLM's CPU backend (tensor
    parallel 1) the actor and its engine's processes keep to share ``index``
    (:func:`~services.rollout.environment.pin_here`); elsewhere it changes nothing. ``cpu_threads``: at
    most this many threads for an in-process CPU engine that generates while actor ranks update beside
    it on the same cores (``trainer.off_policy_steps: 1``): its share, not every core."""

    def __init__(
        self,
        model: str,
        config: dict[str, Any] | None = None,
        frame_root: str | None = None,
        *,
        source: Any = None,
        reward: dict[str, Any] | None = None,
        cpu_slot: tuple[int, int] | None = None,
        cpu_threads: int | None = None,
    ) -> None:
        if source is None and frame_root is not None:
            from services.common.frames import FrameStore

            source = FrameStore(Path(frame_root))
        client = self._client = None
        if reward is not None:
            from services.reward.client import make_reward_client
            from services.reward.config import RewardConfig

            client = make_reward_client(RewardConfig.model_validate(reward))
        self._client = client
        rollout = RolloutConfig.model_validate(config or {})
        cpu = on_cpu()
        # the actor holds this one engine: on the CPU its core and worker run in the actor's process (no
        # processes of their own to start, none polling beside it; docs/rollout.md)
        engine = in_process_resolved(rollout.engine, alone=True, cpu=cpu)
        rollout = rollout.model_copy(update={"engine": engine})
        cores = (
            pin_here(cpu_slot) if cpu_slot is not None and cpu and engine.tensor_parallel_size == 1 else None
        )
        if cpu and engine.in_process:
            # its worker is this process: it computes with this process's torch threads, which Ray set
            # to the actor's CPU count (1 by default)
            import torch

            torch.set_num_threads(engine_threads(cores, cpu_slot, len(os.sched_getaffinity(0)), cpu_threads))
        self.engine = RolloutEngine(model, rollout, source=source, reward_client=client, cpu_cores=cores)

    def info(self) -> dict[str, Any]:
        import torch

        return {
            "model": self.engine.checkpoint.path,
            "family": self.engine.family.name.value,
            "startup_s": self.engine.startup_s,
            "temp_folder": str(self.engine.temp_folder),
            "weight_version": self.engine.weight_version,
            "cpu_cores": self.engine.cpu_cores,
            "threads": torch.get_num_threads(),
            "group_ranks": self.engine.group_ranks,
        }

    def affinity(self) -> dict[str, list[int]]:
        """The cores each of this actor's processes may run on: its own (this thread), then its
        engine's processes by name (e.g. ``VLLM::EngineCore``, ``VLLM::Worker``)."""
        out = {"actor": sorted(os.sched_getaffinity(0))}
        for process in self.engine.footprint.processes:
            out[process.name()] = sorted(process.cpu_affinity())
        return out

    def rollout(self, samples: list[dict[str, Any]], **overrides: Any) -> list[dict[str, Any]]:
        groups = self.engine.rollout([RolloutSample.model_validate(s) for s in samples], **overrides)
        return [g.model_dump() for g in groups]

    def push_weights(self, weights: bytes | str | dict[str, Any], transport: str = "file") -> float:
        """``weights``: safetensors bytes, a folder this actor can read, or a state dict (through Ray's
        object store)."""
        return self.engine.push_weights(weights, transport=transport)

    # a bucketed push, one call per bucket (``RolloutEngine.begin_weight_buckets``): a bucket passed as
    # an object reference arrives resolved, fetched by this actor from the rank that made it
    def begin_weight_buckets(self, announced: list[tuple[str, tuple[int, ...]]]) -> None:
        self.engine.begin_weight_buckets([(name, tuple(shape)) for name, shape in announced])

    def load_weight_bucket(self, bucket: dict[str, Any]) -> int:
        return self.engine.load_weight_bucket(bucket)

    def end_weight_buckets(self, failed: bool = False) -> int:
        return self.engine.end_weight_buckets(failed=failed)

    # the same push over a weight-broadcast group: the engine's workers receive each bucket from rank 0
    def join_weight_group(
        self, address: str, first_rank: int, world: int, timeout_s: float, backend: str
    ) -> None:
        self.engine.join_weight_group(address, first_rank, world, timeout_s, backend)

    def receive_weight_bucket(self, index: int, slots: list[tuple[str, tuple[int, ...], str]]) -> int:
        return self.engine.receive_weight_bucket(index, [(n, tuple(s), d) for n, s, d in slots])

    def sleep(self, level: int = 1) -> bool:
        return self.engine.sleep(level)

    def reset_caches(self) -> None:
        self.engine.reset_caches()

    def wake_up(self) -> bool:
        return self.engine.wake_up()

    def shutdown(self) -> None:
        try:
            self.engine.shutdown()
        finally:
            if self._client is not None:
                self._client.close()


def rollout_actor_class(num_cpus: float = 1.0, **options: Any) -> Any:
    """``RolloutWorker`` as a Ray actor class; ``.remote(model, config_dict, frame_root)`` starts one."""
    import ray

    return ray.remote(num_cpus=num_cpus, **options)(RolloutWorker)
