"""A rank's half of the hybrid engine: the actor and its colocated vLLM shard taking turns on the rank's
device (``rollout.placement: colocated``).

:class:`HybridRank` is mixed into the Ray rank (``services.trainer.ray_group.ActorWorker``); the driver
reaches it through ``services.rollout.colocated.ColocatedEngine``. What the device holds, per phase of
a step (docs/rollout.md, "What each GPU holds"):

- **start:** the actor (and the reference model) go to the host before the shard starts, so vLLM
  sizes its KV cache in the memory they leave (``gpu_memory_utilization`` of the device, measured
  with the actor away);
- **generation:** the shard's weights and KV cache; the actor's weights, gradients, AdamW moments and
  the reference model wait in host memory (``actor.offload_during_rollout``);
- **the trainer's turn** (``engine_sleep``): the shard sleeps (``rollout.engine.sleep_level``), the
  allocator's cache is emptied, everything parked comes back;
- **the engine's turn** (``engine_load``): the moments and gradients leave, the shard's weights wake,
  the push runs bucket by bucket, the actor's weights and the reference leave, the cache is emptied,
  and the KV cache wakes last.

The order lives in ``ColocatedRolloutEngine.hand_back`` / ``take_back``; this module only says what the
rank parks at each point. Every method here is called on every rank at once (the push gathers each
bucket collectively).
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

import torch

from services.rollout.config import RolloutConfig
from services.rollout.samples import RolloutSample

log = logging.getLogger(__name__)

#: what leaves the device before the engine's weights wake (the push reads only the weights)
BEFORE_PUSH = ("grads", "optimizer")


class HybridRank:
    """The colocated-engine methods of a Ray rank; ``self.group`` is its ``LocalActorGroup``."""

    group: Any
    engine: Any = None

    @property
    def _parks(self) -> bool:
        return bool(self.group.config.actor.offload_during_rollout)

    def engine_start(self, model_path: str, rollout: dict[str, Any]) -> int:
        """Start this rank's shard (every rank at once: vLLM builds its groups over the ranks' own
        process group); returns the engine's index. A lone rank joins a world of one first (vLLM's
        external launcher needs one); ``setup`` exported the rendezvous it uses."""
        import torch.distributed as dist

        from services.rollout.colocated import ColocatedRolloutEngine, colocated_config

        if not dist.is_initialized():
            # a world of one: vLLM's external launcher reads RANK and LOCAL_RANK and joins env://
            # (a Ray rank's setup exported the rendezvous; a rank without Ray picks its own)
            for key, value in (
                ("MASTER_ADDR", "127.0.0.1"),
                ("RANK", "0"),
                ("LOCAL_RANK", "0"),
                ("WORLD_SIZE", "1"),
            ):
                os.environ.setdefault(key, value)
            os.environ.setdefault("MASTER_PORT", str(free_port()))
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", rank=0, world_size=1)
        config = colocated_config(RolloutConfig.model_validate(rollout))
        if self._parks:
            freed = self.group.offload()  # the KV cache is sized in the room the actor leaves
            log.info("rank %s: actor parked on the host before its engine starts: %s", os.getpid(), freed)
        self.engine = ColocatedRolloutEngine(model_path, config, source=self.group.source)
        return self.engine.engine_index

    def engine_rollout(self, samples: list[dict[str, Any]], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        groups = self.engine.rollout([RolloutSample.model_validate(s) for s in samples], **kwargs)
        return [g.model_dump() for g in groups]

    def engine_sleep(self, level: int) -> bool:
        """The trainer's turn: the shard sleeps at ``level``, then the actor comes back to the device."""
        return self.engine.hand_back(level, reload=self.group.resident)

    def engine_load(self, bucket_mb: float) -> int:
        """The engine's turn: the FSDP parameters (a LoRA actor's merged view: ``weight_buckets`` reads
        ``push_state``) into this rank's shard in buckets on the rank's device, the shard waking around
        the push in stages; returns the engine's new weight version."""
        from services.trainer.weight_buckets import weight_buckets

        actor = self.group.actor
        weights = weight_buckets(actor.model, self.group.push_dtype, bucket_mb, actor.device)
        parks = self._parks
        return self.engine.take_back(
            weights,
            park_optimizer=self._before_push if parks else self.group.resident,
            park_actor=self.group.offload if parks else None,
        )

    def _before_push(self) -> None:
        """What the push does not read leaves; the weights are on the device (after a resume they may
        still be parked from the start)."""
        self.group.offload(BEFORE_PUSH)
        self.group.reload(["params"])

    def engine_shutdown(self) -> None:
        """Stop the shard; vLLM's cleanup destroys the ranks' process group with its own, so nothing
        collective can follow (the run's checkpoints are written before the engines stop)."""
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.shutdown()


class LocalHybrid(HybridRank):
    """The one rank of a world without Ray (``trainer.use_ray: false``, ``actor.world_size: 1``): the
    trainer's own ``LocalActorGroup`` and its colocated shard, in this process."""

    def __init__(self, group: Any) -> None:
        if group is None or getattr(group, "world_size", 1) != 1:
            raise ValueError("a colocated engine without Ray needs the trainer's one local actor rank")
        self.group = group


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
