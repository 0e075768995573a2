"""Where a run's rollout engines go: the one place that turns ``rollout.placement`` into a started
:class:`~services.rollout.fleet.Fleet`.

``resolve`` fills in the placement and engine count, ``check_hardware`` refuses, before anything starts,
a placement the machine or the Ray cluster cannot hold (naming the way out), and ``STARTERS`` maps each
placement to the function that starts its engines. ``--print-config`` checks the tree statically
(``services.trainer.config.fleet_problems``); only this module looks at the hardware.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from services.rollout.config import RolloutConfig, in_process_resolved, sleep_level
from services.rollout.fleet import Fleet
from services.trainer.config import TrainConfig
from services.trainer.layout import Layout, PlacementError, resolve

__all__ = ["STARTERS", "Layout", "PlacementError", "check_hardware", "resolve", "start_fleet"]

log = logging.getLogger(__name__)


def check_hardware(
    config: TrainConfig, layout: Layout, *, cuda: bool, ray_resources: dict | None, gpus: int | None = None
) -> None:
    """Refuse a layout this machine (``gpus``: the CUDA devices it sees, None: ask torch) or the Ray
    cluster (``ray_resources``: its free resources) cannot hold. Disaggregated engines need GPUs beside
    the actor ranks' when the cluster has GPUs, and CPUs; engines in the driver share its first GPUs."""
    if layout.placement == "driver" and cuda:
        if gpus is None:
            import torch

            gpus = torch.cuda.device_count()
        engine, tp = config.rollout.engine, layout.tensor_parallel_size
        if tp > gpus:
            raise PlacementError(
                f"rollout.placement=driver: an engine of rollout.engine.tensor_parallel_size={tp} needs {tp} "
                f"GPU(s), this machine has {gpus}: lower tensor_parallel_size, or run the engines as Ray "
                "actors (rollout.placement=disaggregated) on a cluster with the GPUs"
            )
        share = layout.engines * engine.gpu_memory_utilization
        if engine.kv_cache_gib is None and share > 1:
            raise PlacementError(
                f"rollout.placement=driver: the {layout.engines} engines share the driver's first {tp} GPU(s), "
                f"each taking rollout.engine.gpu_memory_utilization={engine.gpu_memory_utilization:g} of "
                f"their memory, {share:g} in all (and rank 0's actor needs room there too): lower "
                "rollout.engines or gpu_memory_utilization, or set rollout.placement=colocated or "
                "disaggregated"
            )
    if layout.placement == "disaggregated":
        free = ray_resources or {}
        trainer = config.trainer
        if trainer.ray_gpus_rollout is not None:
            per_engine = trainer.ray_gpus_rollout
        else:
            per_engine = float(layout.tensor_parallel_size) if free.get("GPU_total", 0) > 0 else 0.0
        need_gpu, need_cpu = layout.engines * per_engine, layout.engines * trainer.ray_cpus_rollout
        if need_gpu and free.get("GPU", 0.0) < need_gpu:
            raise PlacementError(
                f"rollout.placement=disaggregated: {layout.engines} engine(s) x {per_engine:g} GPU(s) = "
                f"{need_gpu:g} GPU(s) needed beside the actor ranks', the cluster has {free.get('GPU', 0.0):g} "
                "free: lower rollout.engines, set rollout.placement=colocated (engines on the actor ranks' "
                "GPUs) or driver, or add GPU nodes"
            )
        if free.get("CPU", 0.0) < need_cpu:
            raise PlacementError(
                f"rollout.placement=disaggregated: {layout.engines} engine(s) x trainer.ray_cpus_rollout="
                f"{trainer.ray_cpus_rollout:g} = {need_cpu:g} CPU(s) needed, the cluster has "
                f"{free.get('CPU', 0.0):g} free: lower rollout.engines or trainer.ray_cpus_rollout"
            )


Starter = Callable[..., Fleet]


def _start_all(start: Callable[[int], Any], count: int) -> list[Any]:
    """``count`` engines started one after another; the started ones are stopped if one fails."""
    engines: list[Any] = []
    try:
        for index in range(count):
            engines.append(start(index))
    except BaseException:
        for engine in engines:
            try:
                engine.shutdown()
            except Exception as exc:
                log.warning("rollout engine shutdown after a failed start: %s", exc)
        raise
    return engines


def _fleet(
    config: TrainConfig, start: Callable[[int], Any], layout: Layout, current_weights: Any = None
) -> Fleet:
    rollout = config.rollout
    return Fleet(
        _start_all(start, layout.engines), max_tokens=rollout.max_tokens, n=rollout.n,
        timeout_s=rollout.engine_timeout_s, restart=start, current_weights=current_weights,
        sleep_level=sleep_level(rollout.engine, layout.placement),
    )  # fmt: skip


def start_driver(
    config: TrainConfig, layout: Layout, model_path: str, rollout: RolloutConfig, **parts: Any
) -> Fleet:
    """Engines in this process (their vLLM workers are processes of their own). On the CPU each engine
    of a fleet gets its own share of this process's cores: vLLM's ``auto`` binding would put every
    engine's threads on the same cores, and the fleet would generate no faster than one engine. (With
    tensor parallelism the binding names one core list per rank; those engines keep ``auto``.)"""
    from services.rollout.engine import RolloutEngine
    from services.rollout.environment import core_share
    from services.rollout.vllm_bridge import on_cpu

    cores = sorted(os.sched_getaffinity(0))
    spread = layout.engines > 1 and layout.tensor_parallel_size == 1 and on_cpu()
    rollout = with_in_process(rollout, layout, on_cpu())

    def start(index: int) -> Any:
        return RolloutEngine(
            model_path, rollout, source=parts["source"], reward_client=parts["reward_client"],
            cpu_cores=core_share(cores, index, layout.engines) if spread else None,
        )  # fmt: skip

    return _fleet(config, start, layout)


def with_in_process(rollout: RolloutConfig, layout: Layout, cpu: bool) -> RolloutConfig:
    """The driver engines' config with ``engine.in_process`` decided: as set, else in this process for
    one engine on the CPU (tensor parallel 1). Its core and worker then start no processes (a 2-step
    CPU run took 25 s instead of 78 s) and leave no processes spinning beside the update: vLLM's engine
    core and worker poll their shared-memory queues for a second after each message, and two such
    runs at once took 2.7 s a step against 0.9 s in process (docs/rollout.md, "In-process engines").
    A driver fleet keeps processes: engines in one process would generate one at a time (a
    disaggregated engine is alone in its actor's process, which decides: ``RolloutWorker``)."""
    engine = in_process_resolved(rollout.engine, alone=layout.engines == 1, cpu=cpu)
    return rollout.model_copy(update={"engine": engine})


def bucket_push(group: Any, rollout: Any, bucket_mb: float) -> Any:
    """Rank 0's weights in buckets for engines in other Ray actors, as ``rollout.weight_transport``
    says (:func:`weight_transport`): over a weight-broadcast group (``BucketBroadcast``) or as object
    references (``BucketRefs``)."""
    if weight_transport(rollout.weight_transport, str(group.info[0]["device"])) == "broadcast":
        return group.bucket_broadcast(bucket_mb, rollout.weight_group_timeout_s)
    return group.bucket_refs(bucket_mb)


def weight_transport(asked: str | None, rank0_device: str) -> str:
    """``rollout.weight_transport`` decided: as asked, else a gloo broadcast group where rank 0 is on
    the CPU, and object references on GPUs (the NCCL group has not run on a GPU yet: docs/rollout.md)."""
    if asked is not None:
        return asked
    return "object_store" if rank0_device.startswith("cuda") else "broadcast"


def start_disaggregated(
    config: TrainConfig, layout: Layout, model_path: str, rollout: RolloutConfig, **parts: Any
) -> Fleet:
    """One Ray actor per engine, each in a placement group of its own. On the CPU each engine of a
    fleet keeps to its own share of its host's cores, its actor's thread and vLLM's processes alike
    (``RolloutWorker``'s ``cpu_slot``; a replacement takes the share of the engine it replaces)."""
    from services.trainer.ray_rollout import RayRolloutEngine

    trainer = config.trainer
    spread = layout.engines > 1 and layout.tensor_parallel_size == 1
    # generating beside the update, a CPU engine keeps to its bundle's CPUs and leaves the ranks theirs
    # (ray_group.rank_threads subtracts them): both on every core would wait on each other's threads
    from services.trainer.layout import engine_cpus

    threads = engine_cpus(config) if trainer.off_policy_steps else None

    def start(index: int) -> Any:
        return RayRolloutEngine(
            model_path, rollout, source=parts["source"], reward=config.reward.builtin_only(),
            cpus=trainer.ray_cpus_rollout,
            gpus=trainer.ray_gpus_rollout, cpu_slot=(index, layout.engines) if spread else None,
            cpu_threads=threads,
        )  # fmt: skip

    # a replacement fetches rank 0's weights again (a pass of buckets of its own, as the loop pushes
    # them) rather than the fleet holding them in the object store
    group = parts.get("group")
    bucket_mb = config.rollout.weight_bucket_mb
    current = getattr(group, "state_dict_ref", None)
    if bucket_mb is not None and hasattr(group, "bucket_refs"):

        def current() -> Any:
            return bucket_push(group, config.rollout, bucket_mb)

    return _fleet(config, start, layout, current)


def start_colocated(
    config: TrainConfig, layout: Layout, model_path: str, rollout: RolloutConfig, **parts: Any
) -> Fleet:
    """One engine shard per tensor-parallel group of the actor ranks, inside the ranks' own processes
    (``services.rollout.colocated``): all ranks start theirs at once. Ranks on Ray host theirs in their
    actors; a lone rank without Ray hosts its one in this process, beside the actor (one GPU, no Ray)."""
    group = parts.get("group")
    from services.rollout.colocated import ColocatedEngine

    tp = layout.tensor_parallel_size
    bucket_mb = config.rollout.weight_bucket_mb or 512.0
    if config.trainer.use_ray:
        import ray

        workers = getattr(group, "workers", None)
        if not workers:
            raise PlacementError("rollout.placement=colocated on Ray needs the actor ranks' Ray group")
        indices = ray.get([w.engine_start.remote(model_path, rollout.model_dump()) for w in workers])
        engines = [ColocatedEngine(workers[i * tp : (i + 1) * tp], bucket_mb) for i in range(layout.engines)]
    else:
        from services.trainer.hybrid import LocalHybrid

        if layout.engines != 1 or tp != 1:
            raise PlacementError(
                "rollout.placement=colocated without Ray hosts one engine of tensor parallel 1 in this "
                f"process; this layout has {layout.engines} engine(s) of tensor parallel {tp}: set "
                "trainer.use_ray=true"
            )
        workers = [LocalHybrid(group)]
        indices = [workers[0].engine_start(model_path, rollout.model_dump())]
        engines = [ColocatedEngine(workers, bucket_mb, local=True)]
    if indices != [i // tp for i in range(len(workers))]:
        raise PlacementError(f"colocated engines started with indices {indices}, expected one per {tp} ranks")
    rollout_cfg = config.rollout
    # no restart and no re-send: a shard joins the world's collectives, so a lone one can neither be
    # started again nor be left out of the next push's gathers
    return Fleet(
        engines, max_tokens=rollout_cfg.max_tokens, n=rollout_cfg.n, timeout_s=rollout_cfg.engine_timeout_s,
        independent=False, sleep_level=sleep_level(rollout_cfg.engine, "colocated"),
    )  # fmt: skip


#: placement → the function that starts its engines (all take the same arguments)
STARTERS: dict[str, Starter] = {
    "colocated": start_colocated,
    "disaggregated": start_disaggregated,
    "driver": start_driver,
}


def start_fleet(
    config: TrainConfig, model_path: str, *, source: Any, reward_client: Any, group: Any = None
) -> Fleet:
    """The run's engines, per ``rollout.placement``, after checking the hardware can hold them.
    ``group``: the actor ranks (colocated engines live inside them)."""
    import torch

    cuda = torch.cuda.is_available()
    layout = resolve(config, cuda=cuda)
    resources = None
    if layout.placement == "disaggregated":
        import ray

        resources = {**ray.available_resources(), "GPU_total": ray.cluster_resources().get("GPU", 0)}
    check_hardware(config, layout, cuda=cuda, ray_resources=resources)
    log.info(
        "rollout: %d engine(s), placement %s, tensor parallel %d",
        layout.engines, layout.placement, layout.tensor_parallel_size,
    )  # fmt: skip
    return STARTERS[layout.placement](
        config, layout, model_path, config.effective_rollout(), source=source, reward_client=reward_client,
        group=group,
    )  # fmt: skip
