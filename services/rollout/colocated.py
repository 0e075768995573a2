"""Colocated placement: an engine shard inside each actor rank's own process, on the rank's own devices.

Every group of ``tensor_parallel_size`` consecutive FSDP ranks hosts one vLLM engine, as verl's hybrid
engine does: vLLM's ``external_launcher`` executor runs the engine's single worker in the calling
process and builds its groups over the process group the ranks already joined (torch.distributed,
``env://``). No ``data_parallel_size`` is set: vLLM lays the world out as ExternalDP x DP x PP x TP
(``initialize_model_parallel``, vLLM 0.32), so with DP 1 the ``world / tp`` tensor-parallel groups are
external replicas that generate independently (no all-reduce per decode step over the world, no
dummy batches for an idle engine, no engine waiting for the slowest), which is what verl's SPMD engines
do. The engine core runs in-process too (``VLLM_ENABLE_V1_MULTIPROCESSING=0``).

A step's cycle on each rank, one code path for the loop (``services.trainer.ray_group``) and the GPU
bench (``bench/gpu/colocated_steps.py``):

- :meth:`ColocatedRolloutEngine.hand_back` (the trainer's turn): the engine sleeps (level 2 drops the
  weights and the KV cache: the push replaces every weight; level 1 keeps the weights in host memory),
  the allocator's cached blocks go back to the device, then the caller brings its actor back from the
  host;
- :meth:`ColocatedRolloutEngine.take_back` (the engine's turn, after the update): the caller parks what
  the push does not need (AdamW's moments, gradients), the engine wakes its weights only, takes the
  trainer's pass over the FSDP parameters bucket by bucket (``full_tensor()`` per parameter, a
  collective every rank makes in step, on the rank's device; the engine takes an iterator of buckets
  and knows nothing of the trainer), the caller parks the rest of its actor, the allocator's cache is
  emptied, and only then the KV cache wakes, into all the memory the actor gave up.

vLLM's CPU backend hosts the engines (tests/trainer/test_colocated.py: 2 gloo ranks, 2 engines, parity
with the HF model after a bucketed load) but has no sleep mode: there sleeping and waking are no-ops
that say so, and the update shares the host memory with the engines; the cycle's order is the same.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from services.rollout.checkpoint import Checkpoint
from services.rollout.config import RolloutConfig
from services.rollout.engine import RolloutEngine
from services.rollout.engine_base import KV_CACHE, WEIGHTS
from services.rollout.environment import pin_here
from services.rollout.vllm_bridge import (
    engine_kwargs,
    free_cached_device_memory,
    on_cpu,
    seedable_kwargs,
    seeds_supported,
)
from services.rollout.weight_sync import WeightBuckets, check_announced, check_bucket, checkpoint_shapes

log = logging.getLogger(__name__)

SHUTDOWN_WAIT_S = 120.0  # for a rank to stop its shard (vLLM's engine core and groups)
#: the phases of a colocated cycle, in order (what ``observe`` is told after each)
HAND_BACK = ("sleep", "free_cache", "reload")
TAKE_BACK = ("park_optimizer", "wake_weights", "push", "park_actor", "wake_kv_cache")
Observer = Callable[[str], None]


def colocated_kwargs(model: str, config: RolloutConfig, world_size: int) -> dict[str, Any]:
    """``vllm.LLM`` arguments for the shard a rank hosts: the rollout config's, with the external
    launcher. No ``data_parallel_size``: the ``world_size / tensor_parallel_size`` engines are vLLM's
    external data-parallel replicas, each generating on its own (the module's docstring)."""
    tp = config.engine.tensor_parallel_size
    if world_size % tp:
        raise ValueError(
            f"colocated engines: actor.world_size={world_size} is not a multiple of "
            f"rollout.engine.tensor_parallel_size={tp}"
        )
    kwargs = engine_kwargs(model, config)
    kwargs.update(distributed_executor_backend="external_launcher")
    return kwargs


def colocated_config(config: RolloutConfig) -> RolloutConfig:
    """The rollout config of a shard, decided where it runs: ``engine.enable_sleep_mode`` null becomes
    whether this vLLM can sleep (CUDA: yes; its CPU backend: no, and sleeping is then a logged no-op)."""
    engine = config.engine
    if engine.enable_sleep_mode is not None:
        return config
    from services.rollout.vllm_bridge import sleep_mode_available

    engine = engine.model_copy(update={"enable_sleep_mode": sleep_mode_available()})
    return config.model_copy(update={"engine": engine})


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


@contextlib.contextmanager
def shm_names_of_this_world(needed: bool) -> Iterator[None]:
    """While a shard starts on vLLM's CPU backend with tensor parallelism: name its shared-memory
    segments after this world. vLLM's CPU worker names them from the init method's last ``:`` field
    (``VLLM_DIST_IDENT``, ``cpu_worker.init_device``), which the external launcher always gives as
    ``env://`` (``ExecutorWithExternalLauncher._distributed_args``, vLLM 0.32), so every TP group of
    ranks [0, 1] on a host asks for ``/dev/shm/-tp:0-[0-1]-cpushm_*`` with O_EXCL, and a second job, or
    any run after a crash left them, fails to start ("create shm in SHMManager failed. errno: 17").
    Every rank of the world uses one token (rank 0's, broadcast): different names would make vLLM
    fall back to gloo for the group. The ranks' process group exists already, so the init method
    serves only as this name."""
    if not needed:
        yield
        return
    import torch.distributed as dist
    from vllm.v1.executor.uniproc_executor import ExecutorWithExternalLauncher as launcher

    token = [uuid.uuid4().hex[:12] if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(token, src=0)
    original = launcher._distributed_args

    def named(self: Any) -> tuple[str, int, int]:
        _, rank, local_rank = original(self)
        return f"env://reelrl-{token[0]}", rank, local_rank

    launcher._distributed_args = named
    try:
        yield
    finally:
        launcher._distributed_args = original


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
        with shm_names_of_this_world(on_cpu() and self.config.engine.tensor_parallel_size > 1):
            self.llm = self._start(lambda: LLM(**kwargs))

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

    # -- the cycle around the update ------------------------------------------------------------------

    def hand_back(
        self, level: int, reload: Callable[[], Any] | None = None, observe: Observer | None = None
    ) -> bool:
        """The trainer's turn: sleep at ``level`` (2: weights and KV cache dropped; 1: the weights kept in
        host memory), give the allocator's cached blocks back to the device, then ``reload()`` (the
        caller's actor back from the host). Returns whether the engine slept (False on vLLM's CPU
        backend, where the rest still runs in the same order)."""
        observe = observe or _ignore
        slept = self.sleep(level)
        observe("sleep")
        free_cached_device_memory()
        observe("free_cache")
        if reload is not None:
            reload()
        observe("reload")
        return slept

    def take_back(
        self,
        weights: WeightBuckets,
        *,
        park_optimizer: Callable[[], Any] | None = None,
        park_actor: Callable[[], Any] | None = None,
        observe: Observer | None = None,
    ) -> int:
        """The engine's turn, after the update, in the order that leaves the KV cache the most memory
        (verl's ``rollout_mode``): ``park_optimizer()`` (the caller's AdamW moments and gradients to the
        host: the push needs only the weights), wake the engine's weights, load ``weights`` (the pass
        over the FSDP parameters, all ranks at once), ``park_actor()`` (the caller's weights and
        reference model to the host), wake the KV cache (each wake-up first hands the allocator's cached
        blocks back to the device). Returns the engine's new weight version."""
        observe = observe or _ignore
        if park_optimizer is not None:
            park_optimizer()
        observe("park_optimizer")
        self.wake_up([WEIGHTS])
        observe("wake_weights")
        version = self.load_from(weights)
        observe("push")
        if park_actor is not None:
            park_actor()
        observe("park_actor")
        self.wake_up([KV_CACHE])  # each wake-up first empties the allocator's cache
        observe("wake_kv_cache")
        return version


def _ignore(phase: str) -> None:
    return None


class ColocatedEngine:
    """The driver's handle on one colocated engine: the Ray rank actors of one tensor-parallel group
    (``services.trainer.ray_group.ActorWorker``), each hosting its shard. Every call goes to all ranks of
    the group (tensor-parallel shards run the same requests) and the group's first rank answers. A push
    takes no weights: each rank loads its own shard from its FSDP parameters (``loads_from_ranks``),
    waking its engine in stages around it (:meth:`ColocatedRolloutEngine.take_back`); the fleet calls
    every engine's push at once, so every rank of the world gathers each bucket in step. Between pushes
    the engines generate independently of each other."""

    accepts_refs = False
    loads_from_ranks = True

    def __init__(self, workers: Sequence[Any], bucket_mb: float, *, local: bool = False) -> None:
        """``local``: ``workers`` is the one rank of a world without Ray, in this process (its methods
        are called directly), not Ray actors."""
        self.workers, self.bucket_mb, self.local = list(workers), bucket_mb, local
        self.weight_version = 0

    def _all(self, method: str, *args: Any) -> list[Any]:
        if self.local:
            return [getattr(w, method)(*args) for w in self.workers]
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
        """The trainer's turn on every rank of the group (:meth:`ColocatedRolloutEngine.hand_back`: the
        shard sleeps, then the rank's actor comes back from the host)."""
        return any(self._all("engine_sleep", level))

    def wake_up(self) -> bool:
        """Nothing: a colocated engine wakes in stages inside its push (weights, the push, the actor
        parked, then the KV cache: :meth:`ColocatedRolloutEngine.take_back`), so that its KV cache
        returns only once the actor has left the device."""
        return False

    def shutdown(self) -> None:
        """Stop the group's shards, waiting at most ``SHUTDOWN_WAIT_S``: a rank still busy in a hung call
        (an actor runs one call at a time) would never take the shutdown, and the actor group's own
        shutdown kills it after this."""
        if self.local:
            self._all("engine_shutdown")
            return
        import ray

        refs = [w.engine_shutdown.remote() for w in self.workers]
        done, stuck = ray.wait(refs, num_returns=len(refs), timeout=SHUTDOWN_WAIT_S)
        if stuck:
            log.warning("%d colocated shard(s) did not stop in time (busy or hung): left to the ranks' shutdown",
                        len(stuck))  # fmt: skip
        ray.get(done)
