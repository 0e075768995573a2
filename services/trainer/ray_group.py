"""The actor ranks as Ray actors: ``actor.world_size`` :class:`ActorWorker` processes, each one FSDP2 rank
(gloo on CPU, NCCL on GPU) holding a :class:`~services.trainer.group.LocalActorGroup`, placed by a
STRICT_PACK placement group per node, the ranks numbered in node order
(:mod:`services.trainer.ray_placement`).

:class:`RayActorGroup` offers the loop the methods of ``LocalActorGroup`` over ALL sequences of a step:
each rank holds whole response groups balanced by tokens
(:func:`~services.trainer.sequences.balanced_shares`, computed alike here and on every rank), so
log-probs come back per rank and are put back in the step's order, and targets are split the same way. Only rollout samples
(frame-store keys) and token ids go to the ranks; each opens the frame store itself and loads its own
share's frames. The full weights for a push come from rank 0 through Ray's object store.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from services.rollout.config import RolloutConfig
from services.rollout.samples import RolloutGroup, RolloutSample
from services.rollout.sources import ImageFiles, RealtimeSource, WithImages
from services.rollout.weight_sync import BucketBroadcast, BucketRefs
from services.trainer.config import TrainConfig
from services.trainer.hybrid import HybridRank
from services.trainer.layout import colocated_tp, generating_cpus
from services.trainer.ray_placement import CPUS_PER_RANK, RankPlacement, place_ranks
from services.trainer.sequences import as_dicts, group_tokens, rank_shares
from services.trainer.update import SequenceTargets, combine_rank_metrics

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 30.0
# Ray puts its sockets under its temp folder, and a socket path may hold at most 107 characters: a
# run's output folder is used only when it is short enough, otherwise a private folder in /tmp.
RAY_TEMP_MAX_CHARS = 40


def rank_threads(cores: int, node_cpus: float, ranks: int, busy: float = 0.0) -> int:
    """Threads a CPU rank computes with: its part of its node, where ``ranks`` ranks share the node's
    ``node_cpus`` Ray CPUs and the ``cores`` this process may run on (a container or ``taskset`` may
    allow fewer cores than Ray counts), less the ``busy`` CPUs that rollout engines compute on during
    the update (:func:`generating_cpus`); at least one. More threads than free cores would leave each
    of the update's parallel regions waiting on a thread that shares a core with an engine."""
    return max(1, math.floor(min(cores, node_cpus) - busy) // ranks)


class ActorWorker(HybridRank):
    """One rank, inside its own Ray actor process. Built empty; :meth:`setup` joins the process group
    and loads the model (all ranks at once, they rendezvous). A colocated engine shard lives in it too
    (:class:`~services.trainer.hybrid.HybridRank`)."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size
        self.group: Any = None
        self._buckets: Iterator[dict[str, torch.Tensor]] | None = None  # an open weight bucket pass
        self._weight_group: Any = None  # rank 0: its member of the weight-broadcast group
        self._weight_group_token: str | None = None

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def address(self) -> tuple[str, int]:
        """This node's address and a port free on it: the rendezvous, when this is rank 0."""
        import ray

        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def setup(
        self,
        master_addr: str,
        master_port: int,
        config: dict[str, Any],
        model_path: str,
        frame_root: str,
        rollout: dict[str, Any],
        realtime: RealtimeSource | None,
        nodes: Sequence[tuple[float, int, float]],
        images: ImageFiles | None = None,
        reference_path: str | None = None,
        adapter_path: str | None = None,
    ) -> dict[str, Any]:
        """``nodes``: for each rank, its node's Ray CPUs, the ranks placed there and the CPUs engines
        compute on there during the update, which set the threads it computes with on the CPU unless
        ``trainer.torch_threads`` says (:func:`rank_threads`)."""
        import ray
        import torch.distributed as dist

        from services.common.frames import FrameStore
        from services.trainer.group import LocalActorGroup

        cfg = TrainConfig.model_validate(config)
        cuda = torch.cuda.is_available() and bool(ray.get_gpu_ids())
        if cfg.trainer.torch_threads:
            torch.set_num_threads(cfg.trainer.torch_threads)
        elif cuda:
            # a GPU rank prepares its colocated engine's video inputs on the CPU: with its bundle's CPUs
            # (ray_group.cpus_per_rank), whatever OMP_NUM_THREADS Ray started the actor with
            cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1.0)
            torch.set_num_threads(rank_threads(len(os.sched_getaffinity(0)), cpus, 1))
        else:
            # Ray starts an actor of num_cpus < 2 with OMP_NUM_THREADS=1, so on the CPU a lone rank
            # computed its update on one of the node's 2 cores (learning test: 0.93 s a step, not 0.72)
            torch.set_num_threads(rank_threads(len(os.sched_getaffinity(0)), *nodes[self.rank]))
        torch.manual_seed(cfg.trainer.seed)
        if cuda:
            torch.cuda.set_device(0)  # Ray shows each rank only its own GPU
        # exported on every rank, a lone one too: a colocated engine's executor (vLLM's external
        # launcher) reads RANK and LOCAL_RANK and joins env:// even in a world of one (HybridRank)
        os.environ.update(
            MASTER_ADDR=master_addr,
            MASTER_PORT=str(master_port),
            RANK=str(self.rank),
            WORLD_SIZE=str(self.world_size),
            LOCAL_RANK="0",  # Ray shows each rank only its own device
        )
        if self.world_size > 1:
            dist.init_process_group("nccl" if cuda else "gloo", rank=self.rank, world_size=self.world_size)
        source: Any = realtime if realtime is not None else FrameStore(frame_root)
        if images is not None:
            source = WithImages(source, images)
        self.group = LocalActorGroup(
            cfg, model_path, source, RolloutConfig.model_validate(rollout), reference_path=reference_path,
            adapter_path=adapter_path,
        )  # fmt: skip
        return {
            "rank": self.rank,
            "pid": os.getpid(),
            "node": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),  # nodes of one host share an address
            "device": str(self.group.actor.device),
            "threads": torch.get_num_threads(),
        }

    def load_batch(self, samples: list[dict[str, Any]], groups: list[dict[str, Any]]) -> int:
        return self.group.load_batch(
            [RolloutSample.model_validate(s) for s in samples],
            [RolloutGroup.model_validate(g) for g in groups],
        )

    def log_probs(self, temperature: float, reference: bool) -> list[torch.Tensor]:
        return self.group.log_probs(temperature=temperature, reference=reference)

    def update(self, targets: list[SequenceTargets], kwargs: dict[str, Any]) -> dict[str, float]:
        return self.group.update(targets, **kwargs)

    def scheduler_step(self) -> float:
        return self.group.scheduler_step()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Rank 0: every tensor, on the CPU (the driver may have no GPU); other ranks: {}."""
        return {k: v.cpu() for k, v in self.group.state_dict().items()}

    # -- a bucketed push to engines in other actors: every rank walks the buckets together (each tensor
    # is gathered by a collective); rank 0's bucket is the one sent -------------------------------------

    def buckets_plan(self, bucket_mb: float, slots: bool = False) -> dict[str, Any]:
        """What a pass in buckets of ``bucket_mb`` MiB carries: every (name, shape), how many buckets, how
        many bytes, and with ``slots`` each bucket's tensors as a weight group sends them (the same on
        every rank; nothing is opened)."""
        from services.trainer.weight_buckets import manifest, plan, slots_for

        entries = manifest(self.group.actor.push_state(), self.group.push_dtype)  # a LoRA actor: merged names
        groups = plan(entries, bucket_mb)
        return {
            "announced": [(e.name, e.shape) for e in entries],
            "buckets": len(groups),
            "nbytes": sum(e.nbytes for e in entries),
            **({"slots": [slots_for(group) for group in groups]} if slots else {}),
        }

    def buckets_open(self, bucket_mb: float, broadcast: bool = False) -> None:
        """Start a pass over the weights in buckets of ``bucket_mb`` MiB (one open pass per rank): dicts of
        tensors in host memory, or for a ``broadcast`` each bucket's bytes in one buffer (on the rank's
        GPU for an NCCL weight group; only rank 0 keeps them)."""
        from services.trainer.weight_buckets import buckets, packed_buckets

        model, dtype = self.group.actor.model, self.group.push_dtype
        if broadcast:
            device = self.group.actor.device if self._weight_group_backend() == "nccl" else "cpu"
            self._buckets = packed_buckets(model, dtype, bucket_mb, device, keep=self.rank == 0)
        else:
            self._buckets = buckets(model, dtype, bucket_mb)

    def buckets_next(self) -> list[Any]:
        """The pass's next bucket, on the CPU: on rank 0, ``[reference]`` to it in the object store (a
        reference the driver hands on, so a failure here reaches the driver as this rank's, never as
        the engines'); the other ranks keep nothing (they took part in the gathers): ``[]``."""
        import ray

        if self._buckets is None:
            raise RuntimeError("no weight bucket pass is open on this rank")
        bucket = next(self._buckets)
        return [ray.put(bucket)] if self.rank == 0 else []

    def buckets_close(self) -> None:
        self._buckets = None

    # -- the same pass over a weight-broadcast group (services.rollout.weight_group): rank 0 broadcasts
    # each bucket to every engine worker; one group at a time, formed again when the engines change ----

    def _weight_group_backend(self) -> str:
        from services.rollout.weight_group import backend_for

        return backend_for(self.group.actor.device)

    def weight_group_open(self, address: str, world: int, timeout_s: float) -> str:
        """Rank 0: serve and join a new group of ``world`` members at ``address`` (the previous one is
        left); blocks until every engine worker has joined. Returns the group's token, which each
        bucket names (a push over a group formed since is refused)."""
        from services.rollout import weight_group

        if self.rank != 0:
            raise RuntimeError("only rank 0 sends weights to the engines")
        if self._weight_group is not None:
            self._weight_group.close()
        self._weight_group = None
        member = weight_group.join(address, 0, world, timeout_s, self._weight_group_backend())
        self._weight_group, self._weight_group_token = member, uuid.uuid4().hex
        return self._weight_group_token

    def weight_group_token(self) -> str | None:
        """The token of the group rank 0 holds now (None: none, or it broke)."""
        member = self._weight_group
        return self._weight_group_token if member is not None and member.open else None

    def buckets_broadcast(self, index: int, size: int, token: str) -> int:
        """Every rank makes the pass's next bucket (the gathers are collectives); rank 0 broadcasts it as
        bucket ``index`` of ``size`` bytes over the group named ``token`` and returns the bytes sent;
        the others return 0. A rank 0 that fails to make it tells the engines at once
        (``weight_group.ABORT``); a broken group is left, so the engines fail at once too."""
        from services.rollout import weight_group

        if self._buckets is None:
            raise RuntimeError("no weight bucket pass is open on this rank")
        if self.rank != 0:
            next(self._buckets)
            return 0
        member = self._weight_group
        if member is None or self.weight_group_token() != token:
            next(self._buckets)  # the other ranks are gathering this bucket: take part, then refuse
            if member is not None:
                member.close()  # the engines in the group this push was for fail at once, not at the timeout
            raise weight_group.WeightGroupError("rank 0 no longer holds the weight group this push was for")
        buckets = self._buckets
        device = self.group.actor.device if member.backend == "nccl" else "cpu"
        return weight_group.send(member, index, lambda: next(buckets), size, device)

    def warm_start(self, samples: list[dict[str, Any]], kwargs: dict[str, Any]) -> None:
        self.group.warm_start([RolloutSample.model_validate(s) for s in samples], **kwargs)

    def save(self, folder: str) -> None:
        self.group.save(Path(folder))

    def save_model(self, folder: str) -> None:
        self.group.save_model(Path(folder))

    def load_optimizer(self, folder: str) -> None:
        self.group.load_optimizer(Path(folder))

    def shutdown(self) -> None:
        import torch.distributed as dist

        self.engine_shutdown()
        if self.group is not None:
            self.group.shutdown()
        if dist.is_initialized():
            dist.destroy_process_group()


class RayActorGroup:
    """``actor.world_size`` ranks on Ray, driven like a :class:`~services.trainer.group.LocalActorGroup`.

    Ray: an already initialised Ray in this process is used as it is; otherwise ``trainer.ray_address``
    or ``RAY_ADDRESS`` is joined, else a local Ray is started (and stopped by :meth:`shutdown`).
    Each rank asks for ``cpus_per_rank`` CPUs (None: ``ray_placement.default_cpus_per_rank``) and
    ``gpus_per_rank`` GPUs (None: one GPU when the cluster has GPUs, none otherwise), in a STRICT_PACK
    placement group per node: the ``tensor_parallel_size`` ranks of a colocated engine share a node
    (``ray_placement.place_ranks``; refused before any rank starts when the nodes cannot hold them so).
    ``realtime``: the run's realtime source (``data.source_mode: realtime_only``); it holds video paths
    and parameters only, and each rank decodes its own clips.
    ``images``: the run's still images (paths by key), read by each rank. ``reference_path``: the KL
    reference's weights (None: ``actor.model_path``) and ``adapter_path`` (LoRA's, resuming), as for
    the local group.
    ``save`` and ``load_optimizer`` folders must be reachable by every rank (a shared filesystem on a
    cluster).
    """

    def __init__(
        self,
        config: TrainConfig,
        model_path: str,
        frame_root: str | Path,
        rollout: RolloutConfig,
        *,
        realtime: RealtimeSource | None = None,
        images: ImageFiles | None = None,
        cpus_per_rank: float | None = None,
        gpus_per_rank: float | None = None,
        reference_path: str | None = None,
        adapter_path: str | None = None,
    ) -> None:
        self.config = config
        self.world_size = config.actor.world_size
        self.workers: list[Any] = []
        self.placement: RankPlacement | None = None
        self.shares: list[list[int]] = []  # the step's sequence indices each rank holds
        self._owns_ray = False
        self._temp_dir: Path | None = None
        try:
            self._connect(cpus_per_rank)
            self._start(cpus_per_rank, gpus_per_rank)
            addr, port = self._gather([self.workers[0].address.remote()], "address")[0]
            self.info = self._call(
                "setup", addr, port, config.model_dump(mode="json"), str(model_path), str(frame_root),
                rollout.model_dump(mode="json"), realtime, self._nodes(config), images, reference_path,
                adapter_path,
            )  # fmt: skip
        except BaseException:
            self.shutdown()
            raise
        log.info("actor ranks on Ray: %s", self.info)

    # -- Ray ----------------------------------------------------------------------------------------

    def _connect(self, cpus_per_rank: float | None) -> None:
        import ray

        if ray.is_initialized():
            return
        address = self.config.trainer.ray_address or os.environ.get("RAY_ADDRESS")
        if address:
            ray.init(address=address)
        else:
            self._temp_dir = _ray_temp_dir(Path(self.config.trainer.output_dir))
            trainer = self.config.trainer
            # the rollout engines' bundles, when they run on Ray too, must fit beside the ranks
            import torch

            from services.trainer.layout import resolve

            layout = resolve(self.config, cuda=torch.cuda.is_available())
            engines = layout.engines if layout.placement == "disaggregated" else 0
            rollout = trainer.ray_cpus_rollout * engines
            # the cores this process may use (a container or taskset may allow fewer than the machine has)
            cores = len(os.sched_getaffinity(0))
            # null: the CPU ranks' default (a GPU rank's is at most the cores per GPU, which fit anyway)
            ranks = self.world_size * (cpus_per_rank or CPUS_PER_RANK)
            cpus = max(cores, math.ceil(ranks + rollout))
            ray.init(num_cpus=cpus, include_dashboard=False, _temp_dir=str(self._temp_dir))
        self._owns_ray = True

    def _start(self, cpus_per_rank: float | None, gpus_per_rank: float | None) -> None:
        import ray

        self.placement = place_ranks(self.world_size, colocated_tp(self.config), cpus_per_rank, gpus_per_rank)
        log.info(
            "actor ranks by node: %s",
            "; ".join(
                f"{s.first_rank}-{s.first_rank + s.ranks - 1} on {s.node}" for s in self.placement.layout
            ),
        )
        remote = ray.remote(ActorWorker)
        self.workers = [
            remote.options(
                num_cpus=self.placement.cpus_per_rank,
                num_gpus=self.placement.gpus_per_rank,
                scheduling_strategy=self.placement.strategy(rank),
            ).remote(rank, self.world_size)
            for rank in range(self.world_size)
        ]

    def _nodes(self, config: TrainConfig) -> list[tuple[float, int, float]]:
        """For each rank, its node's Ray CPUs, how many ranks were placed on that node, and the CPUs
        engines compute on during the update there. The engines start after the ranks, so their node is
        known only where there is one node; elsewhere none are subtracted."""
        import ray

        nodes = self._gather([w.node.remote() for w in self.workers], "node")
        cpus = {n["NodeID"]: n["Resources"].get("CPU", 1.0) for n in ray.nodes() if n.get("Alive")}
        # threads are counted on the CPU only (a GPU rank computes on its GPU)
        cpu_only = not ray.cluster_resources().get("GPU", 0)
        busy = generating_cpus(config) if len(cpus) == 1 and cpu_only else 0.0
        return [(cpus.get(node, 1.0), nodes.count(node), busy) for node in nodes]

    def _gather(self, refs: Sequence[Any], what: str) -> list[Any]:
        """Every rank's result; the first failure is raised as soon as it happens (its rank named),
        since the other ranks may be waiting for it in a collective."""
        import ray

        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except ray.exceptions.RayError as exc:
                exc.add_note(f"actor rank {list(refs).index(done[0])} of {self.world_size} failed in {what}")
                raise
        return ray.get(list(refs))

    def _call(self, method: str, *args: Any) -> list[Any]:
        """``method(*args)`` on every rank (large arguments are put in the object store once)."""
        import ray

        args = tuple(ray.put(a) if isinstance(a, list | dict) else a for a in args)
        return self._gather([getattr(w, method).remote(*args) for w in self.workers], method)

    # -- the group interface ---------------------------------------------------------------------------

    def load_batch(self, samples: Sequence[RolloutSample], groups: Sequence[RolloutGroup]) -> int:
        """Hand every rank the step's samples and groups; each builds its share. Returns the total."""
        if len(samples) != len(groups):
            raise ValueError(f"{len(samples)} samples for {len(groups)} response groups")
        actor = self.config.actor
        self.shares = rank_shares(
            group_tokens(groups), self.world_size, actor.mini_batches, actor.ulysses_size
        )
        counts = self._call("load_batch", as_dicts(samples), as_dicts(groups))
        if counts != [len(share) for share in self.shares]:
            raise RuntimeError(f"the ranks built {counts} sequences, not their shares' {self.shares}")
        return sum(counts[:: actor.ulysses_size])  # a sequence-parallel group's ranks share one share

    def log_probs(self, *, temperature: float, reference: bool = False) -> list[torch.Tensor]:
        """Per-sequence log-probs of the whole step, in order."""
        parts = self._call("log_probs", temperature, reference)
        by_index = {
            i: lp
            for share, part in zip(self.shares, parts, strict=True)
            for i, lp in zip(share, part, strict=True)
        }
        return [by_index[i] for i in range(len(by_index))]

    def update(self, targets: Sequence[SequenceTargets], **kwargs: Any) -> dict[str, float]:
        total = sum(len(share) for share in self.shares[:: self.config.actor.ulysses_size])
        if len(targets) != total:
            raise ValueError(f"{len(targets)} targets for the {total} sequences of the step")
        refs = [
            w.update.remote([targets[i] for i in share], kwargs)
            for share, w in zip(self.shares, self.workers, strict=True)
        ]
        # the ranks of a sequence-parallel group report the same sequences' shares: count one of each
        return combine_rank_metrics(self._gather(refs, "update")[:: self.config.actor.ulysses_size])

    def scheduler_step(self) -> float:
        return self._call("scheduler_step")[0]

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The full weights (gathered on rank 0, on the CPU) for a push or a save."""
        return self._call("state_dict")[0]

    def state_dict_ref(self) -> Any:
        """Rank 0's full weights as an object reference (every rank takes part in the gather): handed to
        another Ray actor, they travel from rank 0 without a copy in the driver."""
        import ray

        refs = [w.state_dict.remote() for w in self.workers]
        self._gather(refs[1:], "state_dict")  # the other ranks return {}: cheap to fetch
        ray.wait(refs[:1], num_returns=1)
        return refs[0]

    def bucket_refs(self, bucket_mb: float) -> BucketRefs:
        """The weights as a bucketed push for engines in other Ray actors: each bucket is made by every
        rank at once when the push asks for it (rank 0's, as an object reference), so no process holds
        a full copy and the object store holds one bucket at a time (see ``BucketRefs``). The ranks'
        pass opens with the first bucket asked for, so passes made one after another never overlap."""

        plan = self._call("buckets_plan", bucket_mb)[0]

        def refs() -> Iterator[Any]:
            self._call("buckets_open", bucket_mb)
            try:
                for _ in range(plan["buckets"]):
                    (ref,) = self._gather([w.buckets_next.remote() for w in self.workers], "weight buckets")[
                        0
                    ]
                    yield ref
                    del ref  # the bucket leaves the object store once every engine has it
            finally:
                self._call("buckets_close")

        announced = tuple((name, tuple(shape)) for name, shape in plan["announced"])
        return BucketRefs(announced=announced, refs=refs(), nbytes=int(plan["nbytes"]))

    def bucket_broadcast(self, bucket_mb: float, timeout_s: float) -> BucketBroadcast:
        """The weights as a bucketed push over a weight-broadcast group from rank 0 to every engine
        worker (``BucketBroadcast``; gloo on the CPU, NCCL between GPUs): each bucket is made by every
        rank at once and broadcast by rank 0, so no process holds a full copy and nothing passes through
        the object store or the driver. ``timeout_s``: how long a member of the group waits for the
        others. Each push of it is a new pass over the ranks' current parameters."""
        import ray

        from services.rollout.weight_group import layout

        plan = self._call("buckets_plan", bucket_mb, True)[0]
        slots = tuple(tuple((n, tuple(shape), d) for n, shape, d in bucket) for bucket in plan["slots"])
        sizes = [layout(bucket)[1] for bucket in slots]
        rank0 = self.workers[0]
        token: dict[str, str | None] = {"current": None}

        def address() -> str:
            host, port = ray.get(rank0.address.remote())
            return f"{host}:{port}"

        def connect(address: str, world: int) -> Any:
            ref = rank0.weight_group_open.remote(address, world, timeout_s)

            def wait() -> str:
                token["current"] = self._gather([ref], "the weight group")[0]
                return token["current"]

            return wait

        def group() -> str | None:
            token["current"] = ray.get(rank0.weight_group_token.remote())
            return token["current"]

        def send(index: int) -> Any:
            refs = [w.buckets_broadcast.remote(index, sizes[index], token["current"]) for w in self.workers]
            return lambda: self._gather(refs, f"weight bucket {index}")

        return BucketBroadcast(
            announced=tuple((name, tuple(shape)) for name, shape in plan["announced"]),
            buckets=slots,
            sender=rank0._actor_id.hex(),
            backend="nccl" if str(self.info[0]["device"]).startswith("cuda") else "gloo",
            timeout_s=timeout_s,
            address=address,
            connect=connect,
            group=group,
            open=lambda: self._call("buckets_open", bucket_mb, True),
            send=send,
            close=lambda: self._call("buckets_close"),
            nbytes=int(plan["nbytes"]),
        )

    def warm_start(
        self, samples: Sequence[RolloutSample], *, steps: int, lr: float, batch_size: int, seed: int
    ) -> None:
        kwargs = {"steps": steps, "lr": lr, "batch_size": batch_size, "seed": seed}
        self._call("warm_start", as_dicts(samples), kwargs)

    def save(self, folder: Path) -> None:
        self._call("save", str(folder))

    def save_model(self, folder: Path) -> None:
        self._call("save_model", str(folder))

    def load_optimizer(self, folder: Path) -> None:
        self._call("load_optimizer", str(folder))

    def shutdown(self) -> None:
        """Stop every rank (politely, then by force), free the placement group and, when this group
        started or joined Ray, disconnect (a local Ray stops). Safe to call twice."""
        import ray

        workers, self.workers = self.workers, []
        if workers:
            _, stuck = ray.wait(
                [w.shutdown.remote() for w in workers], num_returns=len(workers), timeout=SHUTDOWN_TIMEOUT_S
            )
            if stuck:
                log.warning("%d actor rank(s) did not shut down in time: killed", len(stuck))
            for w in workers:
                ray.kill(w)
        if self.placement is not None:
            self.placement.remove()
            self.placement = None
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False
        if self._temp_dir is not None and self._temp_dir.parent == Path("/tmp"):
            shutil.rmtree(self._temp_dir, ignore_errors=True)
        self._temp_dir = None


def _ray_temp_dir(output_dir: Path) -> Path:
    """``OUTPUT_DIR/ray`` when short enough for Ray's socket paths, else a private folder in /tmp."""
    candidate = output_dir.resolve() / "ray"
    if len(str(candidate)) <= RAY_TEMP_MAX_CHARS:
        candidate.mkdir(parents=True, exist_ok=True)
        return candidate
    return Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
