"""The actor side of a step behind one interface: :class:`LocalActorGroup` runs the actor (and the
reference) in this process, as the only rank or as one rank of an FSDP group; the Ray group
(:mod:`services.trainer.ray_group`) drives one of these per rank. The driver hands over rollout samples
(frame-store keys) and response groups; each rank loads its share's frames itself."""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from services.rollout.checkpoint import Checkpoint
from services.rollout.config import RolloutConfig
from services.rollout.media import FrameSource
from services.rollout.samples import RolloutGroup, RolloutSample
from services.rollout.weight_sync import WeightBuckets
from services.trainer import checkpoints as ckpt
from services.trainer import lora
from services.trainer.actor import Actor, PolicyModel, distributed
from services.trainer.batch import PromptInputs, TokenSequence
from services.trainer.config import TrainConfig
from services.trainer.sequences import (
    build_sequences,
    group_tokens,
    offline_sequences,
    rank_shares,
    shard,
)
from services.trainer.update import SequenceTargets, update_policy

log = logging.getLogger(__name__)


def resident(method: Callable[..., Any]) -> Callable[..., Any]:
    """A group method that reads the actor's (or the reference's) tensors: whatever a colocated engine's
    generation parked on the host (:meth:`LocalActorGroup.offload`) comes back for the call and leaves
    again after it, so the engine keeps the room its KV cache was sized for. A step's update reloads
    them in order anyway (``services.rollout.colocated``); this keeps every other reader (a save
    between steps, a warm start, a resume's optimizer state) from reading emptied storages."""

    @functools.wraps(method)
    def wrapper(self: LocalActorGroup, *args: Any, **kwargs: Any) -> Any:
        kinds, reference = self.parked_kinds()
        self.resident()
        try:
            return method(self, *args, **kwargs)
        finally:
            if kinds:
                self.actor.offload(kinds)
            if reference:
                self.reference.offload()

    return wrapper


class LocalActorGroup:
    """``model_path``: the actor's weights (the run's model, or a checkpoint's when resuming);
    ``reference_path``: the KL anchor's (None: ``actor.model_path``; a resumed run passes what its
    checkpoint recorded, e.g. the warm-started weights, :func:`~services.trainer.checkpoints.reference_source`);
    ``adapter_path``: with ``actor.lora``, a checkpoint's adapters to resume from (None: fresh ones)."""

    def __init__(
        self,
        config: TrainConfig,
        model_path: str,
        source: FrameSource,
        rollout: RolloutConfig,
        reference_path: str | None = None,
        adapter_path: str | None = None,
    ) -> None:
        self.config = config
        self.rank, self.world_size = distributed()
        self.actor = Actor(
            config.actor.model_copy(update={"model_path": model_path}), total_steps=config.trainer.total_steps,
            adapter=Path(adapter_path) if adapter_path else None,
        )  # fmt: skip
        # The reference is where the run's RL started: its initial weights or the warm-started ones,
        # also when resuming from a checkpoint. Under LoRA it is the actor itself with its adapters
        # bypassed (no second copy; services/trainer/lora.py).
        reference = config.actor.model_copy(update={"model_path": reference_path or config.actor.model_path})
        separate = config.algorithm.needs_reference_model and config.actor.lora is None
        self.reference = PolicyModel(reference, trainable=False) if separate else None
        self.checkpoint = Checkpoint.load(model_path)
        self.source, self.rollout = source, rollout
        self.sequences: list[TokenSequence] = []
        self.share: list[int] = []
        self._prompts: dict[str, PromptInputs] = {}

    # -- a step -----------------------------------------------------------------------------------------

    def load_batch(self, samples: Sequence[RolloutSample], groups: Sequence[RolloutGroup]) -> int:
        """Build this rank's share of the step's sequences (:func:`balanced_shares`: whole groups, by
        tokens), loading the frames of its samples only; returns how many it holds."""
        if len(samples) != len(groups):
            raise ValueError(f"{len(samples)} samples for {len(groups)} response groups")
        actor = self.config.actor
        share = rank_shares(group_tokens(groups), self.world_size, actor.mini_batches, actor.ulysses_size)[
            self.rank
        ]
        owner = [g for g, group in enumerate(groups) for _ in group.responses]
        picked = sorted({owner[i] for i in share})
        built = build_sequences(
            [samples[i] for i in picked], [groups[i] for i in picked], self.checkpoint, self.source,
            self.rollout,
        )  # fmt: skip
        # the picked groups' sequences, by their flattened index in the whole step
        chosen = set(picked)
        index = [i for i, g in enumerate(owner) if g in chosen]
        wanted = set(share)
        self.sequences = [s for i, s in zip(index, built, strict=True) if i in wanted]
        self.share = share  # their indices in the step's (group, response) order
        return len(self.sequences)

    @resident
    def log_probs(self, *, temperature: float, reference: bool = False) -> list[torch.Tensor]:
        if not reference:
            return self.actor.log_probs(self.sequences, temperature=temperature)
        if not self.config.algorithm.needs_reference_model:
            raise ValueError("no reference model: algorithm.kl.mode is off")
        if self.reference is not None:
            return self.reference.log_probs(self.sequences, temperature=temperature)
        with lora.adapters_disabled(self.actor.model):  # LoRA: the base is the reference
            return self.actor.log_probs(self.sequences, temperature=temperature)

    @resident
    def update(
        self, targets: Sequence[SequenceTargets], *, lagging: bool = False, **kwargs: Any
    ) -> dict[str, float]:
        """``lagging``: the batch was sampled by older weights and its old log-probs ARE the engine's
        (trainer.off_policy_steps), so there is no engine/trainer mismatch left to measure."""
        if len(targets) != len(self.sequences):
            raise ValueError(
                f"{len(targets)} targets for {len(self.sequences)} sequences on rank {self.rank}"
            )
        from services.trainer.config import behaviour_logprobs_comparable

        return update_policy(
            self.actor, self.sequences, targets, self.config.algorithm,
            behaviour_comparable=not lagging and behaviour_logprobs_comparable(self.config), **kwargs,
        )  # fmt: skip

    def scheduler_step(self) -> float:
        """Advance the lr schedule; returns the lr the step's update used."""
        lr = self.actor.lr
        self.actor.scheduler.step()
        return lr

    @property
    def push_dtype(self) -> torch.dtype | None:
        """The dtype pushed weights travel in (:func:`services.trainer.weight_buckets.push_dtype`, the one
        rule): ``rollout.engine.dtype`` when named; with ``auto``, the dtype of the checkpoint the
        engine started from (``model_path``, the same folder this group's ``checkpoint`` reads)."""
        from services.trainer.weight_buckets import checkpoint_dtype, push_dtype

        return push_dtype(self.rollout.engine.dtype, checkpoint_dtype(self.checkpoint.hf_config))

    @resident
    def state_dict(self) -> dict[str, torch.Tensor]:
        """Full weights for a push, in the engine's dtype (every rank must call; rank 0 receives them).
        A bucketed sender reads them one tensor at a time instead: ``actor.full_tensors(push_dtype)``."""
        return self.actor.full_state_dict(self.push_dtype)

    @resident
    def weight_buckets(self, bucket_mb: float) -> WeightBuckets | None:
        """The weights as a bucketed push (``services.trainer.weight_buckets``), or None where the
        tensors are sharded over ranks: a pass then is a collective the driver cannot run alone."""
        if self.world_size != 1:
            return None
        from services.trainer.weight_buckets import weight_buckets

        return weight_buckets(self.actor.model, self.push_dtype, bucket_mb)

    # -- warm start ---------------------------------------------------------------------------------------

    @resident
    def warm_start(
        self, samples: Sequence[RolloutSample], *, steps: int, lr: float, batch_size: int, seed: int
    ) -> None:
        """Supervised steps on ``offline_output`` (token-mean NLL over the whole batch, across ranks),
        with an AdamW of their own: RL's optimizer and schedule start fresh afterwards."""
        rng = random.Random(seed)
        params = [p for p in self.actor.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        for step in range(1, steps + 1):
            batch = rng.sample(list(samples), min(batch_size, len(samples)))
            mine = [batch[i] for i in shard(len(batch), self.actor.dp_rank, self.actor.dp_size)]
            sequences = offline_sequences(mine, self.checkpoint, self.source, self.rollout, self._prompts)
            micro = self.actor.micro_batches(sequences, self.actor.positions(sequences))
            counted = torch.tensor(sum(float(mb.response_mask.sum()) for mb in micro))
            total = self.actor.data_parallel_sum(counted)
            nll = 0.0
            for mb in self.actor.aligned(micro):
                logp, _ = self.actor.forward(mb)
                loss = -(logp * mb.response_mask.to(logp.device)).sum() / total * self.world_size
                if mb.dummy:
                    loss = loss * 0.0
                loss.backward()
                nll += float(loss.detach()) / self.world_size
            norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if step % 20 == 0 or step == steps:
                log.info("warm start %d/%d: nll %.3f (grad norm %.2f)", step, steps, nll, float(norm))
        if self.reference is not None:
            # KL anchors RL to where it starts: the warmed weights, not the random ones before them
            self.reference.model.load_state_dict(self.actor.model.state_dict())

    # -- checkpoints ------------------------------------------------------------------------------------

    @resident
    def save(self, folder: Path) -> None:
        """The HF model (rank 0) and every rank's optimizer state into ``folder`` (all ranks call). With
        ``actor.lora`` the adapters alone (``adapter/``, peft's format): the base is ``actor.model_path``."""
        if self.actor.lora is not None:
            lora.save_adapter(
                self.actor.model, folder / ckpt.ADAPTER_DIR, self.actor.lora, self.config.actor.model_path,
                rank=self.rank, gather=self.actor.gather,
            )  # fmt: skip
        else:
            self.save_model(folder / ckpt.MODEL_DIR)
        ckpt.save_torch(folder / f"optim_rank{self.rank}.pt", self.actor.state())
        self.actor.moments_home()  # actor.offload_optimizer: written, so back to the host

    @resident
    def save_model(self, folder: Path) -> None:
        """The actor's weights as stored (the fp32 master; with LoRA the merged base, in its dtype) as an
        HF checkpoint at ``folder``, written by rank 0 (all ranks call: the weights are gathered one
        tensor at a time as rank 0 writes)."""
        self.actor.save_pretrained(folder)

    @resident
    def load_optimizer(self, folder: Path) -> None:
        path = folder / f"optim_rank{self.rank}.pt"
        if not path.exists():
            raise FileNotFoundError(
                f"{path}: the checkpoint was written by a run with another actor.world_size"
            )
        self.actor.load_state(ckpt.load_torch(path))

    # -- the device during a colocated engine's generation ----------------------------------------------

    def offload(self, kinds: Sequence[str] | None = None) -> dict[str, int]:
        """Park the actor's ``kinds`` on the host (None: its weights, gradients and optimizer state, and
        the reference model's weights) while a colocated engine generates on this rank's device; returns
        the bytes freed by kind (``reference`` for the reference model)."""
        freed = self.actor.offload(kinds)
        if kinds is None and self.reference is not None:
            freed["reference"] = self.reference.offload()["params"]
        return freed

    def reload(self, kinds: Sequence[str] | None = None) -> int:
        """What :meth:`offload` parked (of the actor's ``kinds``; None: everything, the reference too),
        back on the device; returns the bytes."""
        moved = self.actor.reload(kinds)
        if kinds is None and self.reference is not None:
            moved += self.reference.reload()
        return moved

    def parked_kinds(self) -> tuple[list[str], bool]:
        """The actor's kinds parked now, and whether the reference is."""
        return self.actor.parked_kinds(), self.reference is not None and self.reference.parked

    @property
    def parked(self) -> bool:
        kinds, reference = self.parked_kinds()
        return bool(kinds) or reference

    def resident(self) -> None:
        """Everything parked back on the device (a no-op when nothing is)."""
        if self.parked:
            self.reload()

    def shutdown(self) -> None:
        self.sequences, self._prompts = [], {}
