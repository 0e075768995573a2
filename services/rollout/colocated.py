"""Colocated placement: an engine shard inside each actor rank's own process, on the rank's own devices.

Every group of ``tensor_parallel_size`` FSDP ranks hosts one vLLM engine, as verl's hybrid engine does:
vLLM's ``external_launcher`` executor runs the engine's single worker in the calling process and builds
its tensor- and data-parallel groups over the process group the ranks already joined (torch.distributed,
``env://``), so ``data_parallel_size = world_size / tensor_parallel_size`` engines exist at once, one
per TP group, each serving its own requests. The engine core runs in-process too
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, which vLLM sets for this executor).

The update cycle, per rank:

1. ``sleep()`` before the update: vLLM's sleep mode (CUDA) level 1 offloads the weights to host memory
   and drops the KV cache, so FSDP gets the GPU memory back (tags ``weights`` and ``kv_cache``);
2. the update;
3. ``wake_up(["weights"])`` (the weight buffers only, the KV cache stays released while the full
   tensors travel), then :meth:`ColocatedShard.load_from` takes the trainer's pass over the FSDP
   parameters bucket by bucket (``full_tensor()`` per parameter, a collective every rank makes in step,
   cast to the engine's dtype, on the rank's device: ``services.trainer.weight_buckets``) and loads each
   bucket in place; no tensor leaves the rank's process, nothing goes through the driver;
4. ``wake_up(["kv_cache"])`` and generate.

vLLM's CPU backend hosts the engines (tests/trainer/test_colocated.py: 2 gloo ranks, 2 engines, parity
with the HF model after a bucketed load) but has no sleep mode: there ``sleep`` and ``wake_up`` are
no-ops that say so, and the update shares the host memory with the engines.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

from services.rollout.checkpoint import Checkpoint
from services.rollout.config import RolloutConfig
from services.rollout.engine import RolloutEngine
from services.rollout.environment import pin_here
from services.rollout.vllm_bridge import (
    engine_kwargs,
    free_cached_device_memory,
    on_cpu,
    seedable_kwargs,
    seeds_supported,
    sleep_mode_available,
)
from services.rollout.weight_sync import WeightBuckets, check_announced, check_bucket, checkpoint_shapes

log = logging.getLogger(__name__)

SHUTDOWN_WAIT_S = 120.0  # for a rank to stop its shard (vLLM's engine core and groups)
#: vLLM's sleep-mode tags: what ``wake_up`` may bring back one at a time
WEIGHTS, KV_CACHE = "weights", "kv_cache"


def colocated_kwargs(model: str, config: RolloutConfig, world_size: int) -> dict[str, Any]:
    """``vllm.LLM`` arguments for the shard a rank hosts: the rollout config's, with the external
    launcher and one data-parallel replica per tensor-parallel group of the ``world_size`` ranks."""
    tp = config.engine.tensor_parallel_size
    if world_size % tp:
        raise ValueError(
            f"colocated engines: actor.world_size={world_size} is not a multiple of "
            f"rollout.engine.tensor_parallel_size={tp}"
        )
    kwargs = engine_kwargs(model, config)
    kwargs.update(distributed_executor_backend="external_launcher", data_parallel_size=world_size // tp)
    return kwargs


def load_from_model(llm: Any, checkpoint: Checkpoint, weights: WeightBuckets, rank: int) -> int:
    """Load ``weights`` (a pass the trainer makes over its FSDP model, bucket by bucket, on this rank's
    device) into the in-process engine ``llm``; every rank calls it together (each bucket is gathered
    collectively as the pass makes it). Names and shapes are checked against the checkpoint before the
    first bucket. Returns how many buckets it took."""
    announced = list(weights.announced)
    check_announced(announced, checkpoint.parameter_names, checkpoint_shapes(checkpoint))
    rpc = llm.collective_rpc
    rpc("reelrl_begin_buckets")
    count, offset = 0, 0
    try:
        for bucket in weights.open():
            check_bucket(bucket, announced[offset : offset + len(bucket)])
            (loaded,) = rpc("reelrl_load_tensors", args=(bucket,))
            if loaded != len(bucket):
                raise RuntimeError(f"rank {rank}: engine loaded {loaded} of {len(bucket)} tensors")
            offset += len(bucket)
            del bucket  # the engine copied it into its own storage
            count += 1
    finally:
        (missing,) = rpc("reelrl_end_buckets")
    if missing:
        raise RuntimeError(f"rank {rank}: {len(missing)} engine parameters not loaded (e.g. {missing[:3]})")
    return count


class ColocatedShard:
    """The engine shard of this rank (``torch.distributed`` must be initialised, every rank of the world
    constructs one at the same time). ``llm`` is the plain ``vllm.LLM``; generation goes through it."""

    def __init__(self, model: str, config: RolloutConfig) -> None:
        import torch.distributed as dist
        from vllm import LLM

        if not dist.is_initialized():
            raise RuntimeError(
                "a colocated engine shard joins the actor ranks' process group: initialise it first"
            )
        self.config = config
        self.checkpoint = Checkpoint.load(model)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.engine_index = self.rank // config.engine.tensor_parallel_size
        self.cpu_cores = own_cores(self.rank) if on_cpu() else None
        started = time.perf_counter()
        self.llm = LLM(**colocated_kwargs(model, config, self.world_size))
        self.startup_s = time.perf_counter() - started
        self.weight_version = 0
        self.asleep = False
        self.sleep_mode = bool(config.engine.enable_sleep_mode) and sleep_mode_available()

    # -- memory -------------------------------------------------------------------------------------

    def sleep(self, level: int = 1) -> bool:
        """Release the weights (offloaded to host memory at level 1, dropped at level 2) and the KV cache
        for the update; False, doing nothing, where vLLM has no sleep mode (its CPU backend) or
        ``engine.enable_sleep_mode`` is off."""
        if not self.sleep_mode:
            log.info(
                "colocated engine %d: no sleep mode here, it keeps its memory during the update",
                self.engine_index,
            )
            return False
        self.llm.sleep(level=level)
        self.asleep = True
        return True

    def wake_up(self, tags: Sequence[str] | None = None) -> bool:
        """Bring back ``tags`` (None: everything) of what :meth:`sleep` released."""
        if not self.asleep:
            return False
        free_cached_device_memory()
        self.llm.wake_up(tags=list(tags) if tags is not None else None)
        if tags is None or KV_CACHE in tags:
            self.asleep = False
        return True

    # -- weights ------------------------------------------------------------------------------------

    def load_from(self, weights: WeightBuckets) -> int:
        """Load the FSDP model's current weights, as the trainer's pass ``weights`` gathers them, into
        this rank's engine (:func:`load_from_model`); the engine's ``weight_version`` goes up by one."""
        try:
            return load_from_model(self.llm, self.checkpoint, weights, self.rank)
        finally:
            self.weight_version += 1
            self.llm.llm_engine.set_weight_version(str(self.weight_version))
            self.llm.llm_engine.reset_encoder_cache()
            self.llm.reset_prefix_cache()

    # -- lifetime -----------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop the in-process engine core. vLLM's cleanup then destroys its groups AND the ranks' default
        process group (``cleanup_dist_env_and_memory``, vLLM 0.32), so this is the last collective
        thing a rank does: checkpoints and the final gather come before it."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()


def own_cores(rank: int) -> list[int]:
    """On vLLM's CPU backend, pin this rank (its process, every thread of it, the shard inside it) to
    its own share of its host's cores, and return them. The shard runs on vLLM's
    ``external_launcher`` executor, in this process, which binds no threads
    (``VLLM_CPU_OMP_THREADS_BIND`` is read only by the multiprocess executor): two shards on one host
    left to float took each other's cores (a 2-step run took 60 s, or stalled for 10 minutes). A Ray
    rank's threads are its share of its node (``ray_group.rank_threads``). Every rank calls this at
    once (one gather of host names: the ranks that share this host split its cores in rank order)."""
    import torch.distributed as dist

    hosts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    here = [r for r, host in enumerate(hosts) if host == hosts[rank]]
    cores = pin_here((here.index(rank), len(here))) or sorted(os.sched_getaffinity(0))
    log.info("colocated shard of rank %d: cores %s", rank, cores)
    return cores


class ColocatedRolloutEngine(RolloutEngine):
    """A :class:`~services.rollout.engine.RolloutEngine` (prompts, media, groups, caches, versions) whose
    vLLM is this rank's colocated shard: built by every rank of the world at once, inside the rank's
    process, over its process group (``env://``)."""

    # in the rank's process by construction, over the ranks' own group (external_launcher): not an
    # ``engine.in_process`` engine, whose checks (no group of the caller's) would refuse it
    can_run_in_process = False

    def _launch(self) -> None:
        import torch.distributed as dist
        from vllm import LLM

        if not dist.is_initialized():
            raise RuntimeError("a colocated engine joins the actor ranks' process group: initialise it first")
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.engine_index = self.rank // self.config.engine.tensor_parallel_size
        if on_cpu():
            self.cpu_cores = own_cores(self.rank)
        kwargs = seedable_kwargs(
            colocated_kwargs(self.checkpoint.path, self.config, self.world_size), on_cpu()
        )
        self.seedable = seeds_supported(kwargs, on_cpu())
        self.llm = self._start(lambda: LLM(**kwargs))

    def rollout(self, samples: Sequence[Any], n: int | None = None, **kwargs: Any) -> list[Any]:
        """As :meth:`RolloutEngine.rollout`, in step with every other engine of the world. Under the
        external launcher vLLM's data-parallel engines step together: each pass of a generate loop
        all-reduces "any request unfinished?" over the engines (``LLMEngine.has_unfinished_requests``,
        vLLM 0.32), so an engine that never enters the loop leaves the others waiting for good. An
        engine given no samples, or whose samples fail before its loop ran (e.g. one refused by name),
        still runs the loop with no requests of its own until the others finish; the error is raised
        after."""
        self._looped = False
        try:
            groups = super().rollout(samples, n, **kwargs) if samples else []
        except BaseException:
            if not self._looped:
                try:
                    self._idle_loop()
                except Exception:  # the error that brought us here is the one to report
                    log.exception("colocated engine %d: could not step with the others", self.engine_index)
            raise
        if not self._looped:
            self._idle_loop()
        return groups

    def _run_requests(self, prompts: list[Any], params: list[Any]) -> list[Any]:
        outputs = super()._run_requests(prompts, params)
        self._looped = True
        return outputs

    def _idle_loop(self) -> None:
        """Step with the other engines, with no requests of this one's, until none has any left."""
        self._check_ready("step with the other engines")
        with self._calling():
            self.llm.wait_for_completion(use_tqdm=False)
        self._looped = True

    def load_from(self, weights: WeightBuckets) -> int:
        """The FSDP model's weights (the trainer's pass ``weights``) into this rank's engine
        (:func:`load_from_model`, all ranks at once); returns the engine's new weight version."""
        self._check_ready("push weights")
        try:
            load_from_model(self.llm, self.checkpoint, weights, self.rank)
        finally:
            self.weight_version += 1
            self.llm.llm_engine.set_weight_version(str(self.weight_version))
        self._weights_discarded = False
        self.reset_caches(processed_inputs=False)
        return self.weight_version


class ColocatedEngine:
    """The driver's handle on one colocated engine: the Ray rank actors of one tensor-parallel group
    (``services.trainer.ray_group.ActorWorker``), each hosting its shard. Every call goes to all ranks of
    the group (tensor-parallel shards run the same requests) and the group's first rank answers. A push
    takes no weights: each rank loads its own shard from its FSDP parameters (``loads_from_ranks``);
    the fleet calls every engine's push at once, so every rank of the world gathers each bucket in step."""

    accepts_refs = False
    loads_from_ranks = True

    def __init__(self, workers: Sequence[Any], bucket_mb: float) -> None:
        self.workers, self.bucket_mb = list(workers), bucket_mb
        self.weight_version = 0

    def _all(self, method: str, *args: Any) -> list[Any]:
        import ray

        return ray.get([getattr(w, method).remote(*args) for w in self.workers])

    def rollout(self, samples: Sequence[Any], **kwargs: Any) -> list[Any]:
        from services.rollout.samples import RolloutGroup

        dumped = self._all("engine_rollout", [s.model_dump() for s in samples], kwargs)[0]
        return [RolloutGroup.model_validate(g) for g in dumped]

    def push_weights(self, weights: Any = None) -> float:
        started = time.perf_counter()
        self.weight_version = int(self._all("engine_load", self.bucket_mb)[0])
        return time.perf_counter() - started

    def sleep(self, level: int = 1) -> bool:
        return any(self._all("engine_sleep", level))

    def wake_up(self) -> bool:
        return any(self._all("engine_wake"))

    def shutdown(self) -> None:
        """Stop the group's shards, waiting at most ``SHUTDOWN_WAIT_S``: a rank still busy in a hung call
        (an actor runs one call at a time) would never take the shutdown, and the actor group's own
        shutdown kills it after this."""
        import ray

        refs = [w.engine_shutdown.remote() for w in self.workers]
        done, stuck = ray.wait(refs, num_returns=len(refs), timeout=SHUTDOWN_WAIT_S)
        if stuck:
            log.warning("%d colocated shard(s) did not stop in time (busy or hung): left to the ranks' shutdown",
                        len(stuck))  # fmt: skip
        ray.get(done)
