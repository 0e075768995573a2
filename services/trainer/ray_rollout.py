"""A rollout engine as a Ray actor in its own placement group: one member of a ``disaggregated`` fleet
(``rollout.placement``; ``services.rollout.fleet``), driven exactly like an in-process
:class:`RolloutEngine`.

Only sample dicts (frame-store keys, image paths) go in and response groups come out; the frame source
(store, realtime decoder, still images) travels as paths and is read inside the actor. New weights
travel through Ray's object store: a state dict, or bucket by bucket as the actor ranks make them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from services.reward.config import RewardConfig
from services.rollout.config import RolloutConfig
from services.rollout.samples import RolloutGroup, RolloutSample

log = logging.getLogger(__name__)
START_TIMEOUT_S = 900.0  # a cold vLLM start (model load, profiling) on a loaded machine


class RayRolloutEngine:
    """One :class:`~services.rollout.worker.RolloutWorker` actor on a bundle of ``cpus`` CPUs and
    ``gpus`` GPUs (None: ``engine.tensor_parallel_size`` GPUs when the cluster has GPUs, none
    otherwise). ``cpu_slot``: (index, count) in a fleet sharing one host's cores (see
    ``RolloutWorker``), and ``cpu_threads`` too. Ray must already be initialised (the actor group does
    it)."""

    def __init__(
        self,
        model_path: str,
        config: RolloutConfig,
        *,
        source: Any,
        reward: RewardConfig,
        cpus: float = 1.0,
        gpus: float | None = None,
        cpu_slot: tuple[int, int] | None = None,
        cpu_threads: int | None = None,
    ) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from services.rollout.worker import RolloutWorker
        from services.trainer.ray_placement import wait_placed

        engine = config.engine
        if engine.tensor_parallel_size > 1 and engine.distributed_executor_backend is None:
            config = config.model_copy(
                update={"engine": engine.model_copy(update={"distributed_executor_backend": "mp"})}
            )
        if gpus is None:
            has_gpus = ray.cluster_resources().get("GPU", 0) > 0
            gpus = float(engine.tensor_parallel_size) if has_gpus else 0.0
        free = ray.available_resources().get("GPU", 0.0)
        if gpus and free < gpus:
            # the actor ranks hold a whole GPU each: an engine of its own needs GPUs beside theirs
            raise RuntimeError(
                f"the rollout engine needs {gpus:g} GPU(s) beside the actor ranks' and the cluster has "
                f"{free:g} free: set rollout.placement=colocated (engines on the actor ranks' GPUs) or "
                "driver (rollout.placement=driver, or trainer.rollout_on_ray=false where no placement is "
                "set: vLLM in the driver, sharing a GPU with rank 0 at rollout.engine.gpu_memory_utilization), "
                "or lower actor.world_size"
            )
        bundle = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
        self.placement_group = placement_group([bundle], strategy="PACK")
        self.worker: Any = None
        try:
            wait_placed(self.placement_group, f"the rollout engine's bundle {bundle}")
            self.worker = (
                ray.remote(RolloutWorker)
                .options(
                    num_cpus=cpus,
                    num_gpus=gpus,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(self.placement_group, 0),
                )
                .remote(
                    model_path,
                    config.model_dump(mode="json"),
                    source=source,
                    reward=reward.model_dump(mode="json"),
                    cpu_slot=cpu_slot,
                    cpu_threads=cpu_threads,
                )
            )
            self.info = ray.get(self.worker.info.remote(), timeout=START_TIMEOUT_S)
        except BaseException:
            self.shutdown()
            raise
        log.info("rollout engine on Ray: %s", self.info)

    def rollout(self, samples: Sequence[RolloutSample], **options: Any) -> list[RolloutGroup]:
        """Like ``RolloutEngine.rollout`` (``n``, ``mix_policy``, the seed ``key`` and sampling
        overrides travel as they are). A dead actor raises Ray's ``RayActorError``; an error of the
        engine inside it arrives as that error (e.g. the ValueError naming a sample)."""
        import ray

        dumped = ray.get(self.worker.rollout.remote([s.model_dump() for s in samples], **options))
        return [RolloutGroup.model_validate(g) for g in dumped]

    def affinity(self) -> dict[str, list[int]]:
        """The cores the actor and each of its engine's processes may run on (``RolloutWorker.affinity``)."""
        import ray

        return ray.get(self.worker.affinity.remote(), timeout=START_TIMEOUT_S)

    @property
    def weight_version(self) -> int:
        """The version the engine inside the actor reports (0: the checkpoint's, +1 per push)."""
        import ray

        return int(ray.get(self.worker.info.remote(), timeout=START_TIMEOUT_S)["weight_version"])

    def sleep(self, level: int = 1) -> bool:
        import ray

        return bool(ray.get(self.worker.sleep.remote(level)))

    def wake_up(self) -> bool:
        import ray

        return bool(ray.get(self.worker.wake_up.remote()))

    def reset_caches(self) -> None:
        """Forget the engine's cached encoder outputs, prefix blocks and processed media."""
        import ray

        ray.get(self.worker.reset_caches.remote())

    # the actor group may hand over rank 0's weights as an object reference (no copy in the driver)
    accepts_refs = True

    # ---- the weight push: one method, so that its transport can change alone --------------------------

    def push_weights(self, state: Any) -> float:
        """``state``: a state dict, or an object reference to one (resolved inside the actor). Buckets by
        reference go through the session below, which the fleet drives for all its engines at once."""
        import ray

        return float(ray.get(self.worker.push_weights.remote(state, "file")))

    def begin_weight_buckets(self, announced: Sequence[tuple[str, tuple[int, ...]]]) -> None:
        """Open a bucketed push inside the actor (names and shapes checked there first)."""
        import ray

        ray.get(self.worker.begin_weight_buckets.remote(list(announced)))

    def load_weight_bucket(self, bucket: Any) -> int:
        """``bucket``: an object reference to a bucket (the actor fetches it from the rank that made it)."""
        import ray

        return int(ray.get(self.worker.load_weight_bucket.remote(bucket)))

    def end_weight_buckets(self, *, failed: bool = False) -> int:
        import ray

        return int(ray.get(self.worker.end_weight_buckets.remote(failed)))

    @property
    def group_ranks(self) -> int:
        """Members this engine adds to a weight-broadcast group: one per worker."""
        return self.info.get("group_ranks", 1)

    def join_weight_group(
        self, address: str, first_rank: int, world: int, timeout_s: float, backend: str
    ) -> None:
        """The engine's workers join the weight-broadcast group (blocks until every member has)."""
        import ray

        ray.get(self.worker.join_weight_group.remote(address, first_rank, world, timeout_s, backend))

    def receive_weight_bucket(self, index: int, slots: Sequence[tuple[str, tuple[int, ...], str]]) -> int:
        """Bucket ``index`` of the open push, broadcast by rank 0 to the engine's workers."""
        import ray

        return int(ray.get(self.worker.receive_weight_bucket.remote(index, list(slots))))

    # ---- end of the weight push ----------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop the engine inside the actor (its shared memory and temp folder go with it), then the
        actor and its placement group. Safe to call twice."""
        import ray
        from ray.util.placement_group import remove_placement_group

        worker, self.worker = self.worker, None
        if worker is not None:
            try:
                ray.get(worker.shutdown.remote(), timeout=120)
            except Exception as exc:  # a dead actor has nothing left to stop
                log.warning("rollout actor shutdown: %s", exc)
            ray.kill(worker)
        group, self.placement_group = self.placement_group, None
        if group is not None:
            remove_placement_group(group)
