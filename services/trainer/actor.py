"""The policy being trained and its frozen reference: HF ``AutoModelForImageTextToText``, sharded with
FSDP2 ``fully_shard`` across ranks (gloo on CPU, NCCL on GPU), scored on exactly the tokens the rollout
sampled (vLLM's M-RoPE rule for Qwen2/2.5-VL, :mod:`services.rollout.consistency`).

One :class:`PolicyModel` per rank; with one rank it runs unsharded in the calling process. Gradients
accumulate over micro-batches packed by token budget; every loss is normalised by the mini-batch's
global token (or sequence) count across micro-batches and ranks, so DAPO's token-mean is global.

Precision: the trained weights, their gradients and AdamW's moments are ``actor.param_dtype`` (fp32);
every forward runs in ``actor.compute_dtype``: under FSDP2 through ``MixedPrecisionPolicy`` (the layer is
all-gathered in the compute dtype, gradients reduce-scattered in fp32), on one rank through autocast.
The frozen reference is stored in the compute dtype. The rollout engine receives the weights in its own
dtype (:meth:`PolicyModel.full_tensors`, :meth:`PolicyModel.full_state_dict`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from services.rollout.consistency import position_ids
from services.trainer import lora, packing, ulysses
from services.trainer.algorithms import entropy_from_logits
from services.trainer.batch import MicroBatch, TokenSequence, collate, pack
from services.trainer.config import ActorConfig
from services.trainer.logprobs import scoring_head
from services.trainer.offload import HostCopies, local, optimizer_tensors, own_optimizer_state, own_storage
from services.trainer.sharded_load import empty_model, load_shards
from services.trainer.sharding import device_mesh
from services.trainer.shared_vision import shared_vision

log = logging.getLogger(__name__)
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    """``"bfloat16"`` → ``torch.bfloat16`` (the names the configs use)."""
    if name not in _DTYPES:
        raise ValueError(f"unknown dtype {name!r}; one of {sorted(_DTYPES)}")
    return _DTYPES[name]


def distributed() -> tuple[int, int]:
    """(rank, world size) of the initialised process group, or (0, 1)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def collective_device() -> torch.device:
    """Where the tensors of a collective must be: NCCL reduces CUDA tensors only, gloo CPU ones."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(value: torch.Tensor) -> torch.Tensor:
    """Sum over ranks, on ``value``'s device (identity with one rank)."""
    if distributed()[1] > 1:
        total = value.to(collective_device(), copy=True)
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total.to(value.device)
    return value


def lr_lambda(step: int, *, warmup: int, total: int, schedule: str, min_ratio: float) -> float:
    """Multiplier of the base lr after ``step`` optimizer steps: linear warmup, then constant or cosine
    decay to ``min_ratio`` at ``total``. Example (warmup 2, total 10, cosine, floor 0): 0.5, 1.0, then
    (1 + cos(pi * (s - 2) / 8)) / 2 for s = 2..10."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant" or total <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


class PolicyModel:
    """A Qwen-VL checkpoint as a scorer of response tokens (the reference model is one of these).

    ``trainable``: stored in ``param_dtype`` (the master the optimizer steps); frozen: stored in
    ``compute_dtype`` (nothing steps it, so nothing is lost). Either way the forwards compute in
    ``compute_dtype``."""

    def __init__(
        self, config: ActorConfig, *, trainable: bool, device: str | None = None, adapter: Path | None = None
    ) -> None:
        """``adapter``: a checkpoint's LoRA adapter folder to start from (``actor.lora``; resuming),
        else fresh adapters."""
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.config = config
        self.trainable = trainable
        self._host: dict[str, HostCopies] = {}  # what offload() parked, by kind
        self.rank, self.world_size = distributed()
        # actor.ulysses_size: groups of consecutive ranks share their sequences, each holding a slice of
        # every packed row (services/trainer/ulysses.py); the data-parallel world is world / ulysses_size
        self.dp_rank, self.dp_size = ulysses.data_parallel(self.rank, self.world_size, config.ulysses_size)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.compute_dtype = torch_dtype(config.compute_dtype)
        self.param_dtype = torch_dtype(config.param_dtype) if trainable else self.compute_dtype
        # actor.lora (services/trainer/lora.py): a frozen base, stored in the compute dtype as a frozen
        # reference is; only the adapters are trained, in param_dtype
        self.lora = config.lora if trainable else None
        if self.lora is not None:
            lora.check_quantize(self.lora, self.device, self.world_size)
        stored = self.compute_dtype if self.lora is not None else self.param_dtype
        self.processor = AutoProcessor.from_pretrained(config.model_path)
        if self.world_size > 1:  # parameters on meta until each rank reads its shards (_shard)
            model = empty_model(config.model_path, stored)
        elif self.lora is not None and self.lora.quantize:
            # QLoRA: the language model's linear layers in NF4 on the device as they load, the rest
            # (vision tower, embeddings, head, norms) in the compute dtype
            model = AutoModelForImageTextToText.from_pretrained(
                config.model_path,
                dtype=stored,
                quantization_config=lora.quantization(self.compute_dtype),
                device_map={"": _device_index(self.device)},
            )
            lora.one_layout(model)
            own_storage(model, self.device)
        else:
            model = AutoModelForImageTextToText.from_pretrained(config.model_path, dtype=stored)
            model.to(self.device)
            own_storage(model, self.device)
        if self.lora is not None:
            lora.inject(model, self.lora, self.param_dtype)
        self.hf_config = model.config
        self.sequence_parallel = None
        if config.ulysses_size > 1:
            ulysses.check_model(model, config.ulysses_size)
            self.sequence_parallel = ulysses.new_group(config.ulysses_size)
        if trainable and config.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if trainable and config.freeze_vision and self.lora is None:  # LoRA: actor.lora.vision decides
            for p in model.model.visual.parameters():
                p.requires_grad_(False)
        if not trainable:
            model.requires_grad_(False)
            model.eval()
        else:
            model.train()
        if self.world_size > 1:
            self._shard(model)
        if self.lora is not None:  # allocated by now (on meta until _shard under FSDP)
            lora.init_adapters(model, self.param_dtype)
            if adapter is not None:
                lora.load_adapter(model, adapter)
        self.model = model
        self.pad_id = int(self.processor.tokenizer.pad_token_id or 0)
        self._vision = VisionDummies(model, self.compute_dtype) if self.world_size > 1 else None

    def _shard(self, model: Any) -> None:
        """FSDP2: each decoder layer and vision block its own unit, then the root (embeddings, head).
        Every unit is all-gathered in the compute dtype and its gradients reduce-scattered in fp32 into
        the fp32 shards the optimizer steps (verl's policy). ``model`` comes with its parameters on the
        meta device: once sharded, each rank allocates its shards and reads its slices of the checkpoint
        into them (:mod:`services.trainer.sharded_load`), so no rank holds the whole model."""
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        # one group over every rank, or groups of actor.fsdp_size that replicate each other (HSDP)
        mesh = device_mesh(self.device.type, self.world_size, self.config.fsdp_size)
        policy = MixedPrecisionPolicy(param_dtype=self.compute_dtype, reduce_dtype=torch.float32)
        # actor.offload_params (the policy) / actor.offload_reference (the frozen reference): the shards
        # live on the host and each unit is copied in for its pass (FSDP2's CPUOffloadPolicy; the
        # optimizer then steps on the CPU)
        on_host = self.config.offload_params if self.trainable else self.config.offload_reference
        options: dict[str, Any] = {"mesh": mesh, "mp_policy": policy}
        if on_host:
            from torch.distributed.fsdp import CPUOffloadPolicy

            options["offload_policy"] = CPUOffloadPolicy(pin_memory=self.device.type == "cuda")
        unit_names = set(getattr(model, "_no_split_modules", None) or ())
        units = [m for m in model.modules() if type(m).__name__ in unit_names]
        if not units:
            raise ValueError(f"{type(model).__name__} names no _no_split_modules to shard by")
        for module in units:
            fully_shard(module, **options)
        fully_shard(model, **options)
        load_shards(model, self.config.model_path, torch.device("cpu") if on_host else self.device)
        own_storage(model, self.device)  # buffers read from a mapped file: parkable (Actor.offload) too
        if on_host and self.device.type != "cpu":  # the buffers (rotary tables) stay with the compute
            for module in model.modules():
                for name, value in list(module._buffers.items()):
                    if value is not None:
                        module._buffers[name] = value.to(self.device)

    def _compute(self) -> Any:
        """The context of a forward: on one rank, autocast to the compute dtype when it is lower than
        the stored weights' (FSDP's policy casts the gathered weights itself)."""
        if self.world_size > 1 or self.compute_dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype)

    # -- inputs ---------------------------------------------------------------------------------------

    def positions(self, sequences: Sequence[TokenSequence]) -> list[torch.Tensor | None]:
        """M-RoPE ids (3, L) per sequence: vLLM's rule for the families whose HF rule differs; for the
        others None (the padded forward derives them), or, packed, the model's own rule per sequence
        (a packed row has no attention mask to derive them from)."""
        out = []
        types = self.processor.create_mm_token_type_ids
        for s in sequences:
            ids = s.prompt.input_ids + s.response_ids
            pos = position_ids(self.hf_config, ids, s.prompt.vision, s.prompt.sample_id)
            if pos is not None:
                out.append(pos[:, 0, :])
            elif self.config.padding_free:
                out.append(packing.hf_positions(self.model, ids, s.prompt.vision, types))
            else:
                out.append(None)
        return out

    def micro_batches(
        self, sequences: Sequence[TokenSequence], positions: Sequence[torch.Tensor | None]
    ) -> list[MicroBatch]:
        """Consecutive sequences within ``actor.micro_batch_tokens``: padded (the budget counts the
        padded layout), or with ``actor.padding_free`` one packed row each (the budget counts real
        tokens; :mod:`services.trainer.packing`)."""
        types = self.processor.create_mm_token_type_ids
        budget = self.config.micro_batch_tokens
        if self.config.padding_free:
            packing.enable_packing(self.model)
            groups = packing.pack_tokens([s.length for s in sequences], budget)
            return [
                packing.collate_packed(sequences, g, positions=positions, mm_token_types=types)
                for g in groups
            ]
        groups = pack([(len(s.prompt.input_ids), len(s.response_ids)) for s in sequences], budget)
        return [
            collate(sequences, g, pad_id=self.pad_id, positions=positions, mm_token_types=types)
            for g in groups
        ]

    def data_parallel_sum(self, value: torch.Tensor) -> torch.Tensor:
        """Sum over the data-parallel ranks: with ``actor.ulysses_size`` the ranks of a group hold the
        same sequences, so only the first of each group contributes (a normaliser counts them once)."""
        if self.sequence_parallel is not None and self.sequence_parallel.rank:
            value = torch.zeros_like(value)
        return all_reduce_sum(value)

    def aligned(self, micro: list[MicroBatch]) -> list[MicroBatch]:
        """``micro`` padded to the largest count on any rank with dummy repeats of its last micro-batch:
        every FSDP forward gathers parameters collectively, so all ranks must run as many (a rank that
        ran fewer would leave the others waiting forever)."""
        if self.world_size == 1:
            return micro
        if not micro:
            raise ValueError(f"rank {self.rank} has no sequence to run: give every rank at least one")
        count = torch.tensor(len(micro), device=collective_device())
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        return micro + [dataclasses.replace(micro[-1], dummy=True) for _ in range(int(count) - len(micro))]

    # -- scoring --------------------------------------------------------------------------------------

    def forward(
        self, mb: MicroBatch, *, temperature: float = 1.0, entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs ``(B, R)`` of the micro-batch's response tokens (0 on padding) and, if asked, the
        per-token entropy of the policy there. Logits are divided by the sampling ``temperature``: the
        policy that is optimised is the distribution the rollout sampled from.

        With ``actor.logprob_chunk_tokens`` set, the LM head scores the response tokens that many at a
        time from the final hidden states (:func:`services.trainer.logprobs.scoring_head`, inside the
        model's own forward, so FSDP2 still gathers the head): no fp32 ``(B, R, V)`` logits exist, in
        the forward or the backward. Null computes the full logits, as before."""
        inputs = {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in mb.inputs.items()}
        targets = mb.response_ids.to(self.device)
        mask = mb.response_mask.to(self.device)
        # What the head scores: the (B, R) grid, or, packed, only the real response tokens (N, in the
        # grid's row-major order: the head pays for no padding), put back into the grid below
        rows = mask.reshape(-1).nonzero().squeeze(-1) if mb.packed else None
        scored, scored_mask = (targets, mask) if rows is None else (targets.reshape(-1)[rows], None)
        keep = mb.logits_to_keep.to(self.device)
        split: Any = contextlib.nullcontext()
        sp = self.sequence_parallel
        if sp is not None:  # this rank scores the response tokens predicted inside its slice of the row
            length = int(inputs["input_ids"].shape[1])
            mine, counts = sp.local_rows(keep, length)
            keep, scored = keep[mine] - sp.span(length)[0], scored[mine]
            split = ulysses.split_sequence(self.model, sp, length)
        chunk = self.config.logprob_chunk_tokens
        head: Any = contextlib.nullcontext()
        if chunk is not None:
            head = scoring_head(
                self.model, scored, torch.ones_like(scored) if scored_mask is None else scored_mask,
                temperature=temperature, chunk_tokens=chunk, entropy=entropy,
            )  # fmt: skip
        if self._vision is None:
            with self._compute(), shared_vision(self.model, inputs, mb.repeats), split, head:
                out = self.model(**inputs, logits_to_keep=keep, use_cache=False)
        else:
            with (
                self._vision.around(inputs) as zero,
                shared_vision(self.model, inputs, mb.repeats),
                split,
                head,
            ):
                out = self.model(**inputs, logits_to_keep=keep, use_cache=False)
        if chunk is not None:  # log-prob, entropy
            scores = out.logits.reshape(*scored.shape, 2)
            logp, ent = scores[..., 0], (scores[..., 1] if entropy else None)
        else:
            logits = out.logits.float().reshape(*scored.shape, -1)
            if temperature != 1.0:
                logits = logits / temperature
            logp_all = torch.log_softmax(logits, dim=-1)
            logp = logp_all.gather(-1, scored.unsqueeze(-1)).squeeze(-1)
            ent = entropy_from_logits(logits) if entropy else None
        if sp is not None:  # every rank of the group: the scores of the whole micro-batch
            if ent is None:
                logp = ulysses.gather_rows(logp, counts, sp)
            else:
                both = ulysses.gather_rows(torch.stack([logp, ent], dim=-1), counts, sp)
                logp, ent = both[..., 0], both[..., 1]
        if rows is not None:
            logp = _to_grid(logp, rows, targets.shape)
            ent = None if ent is None else _to_grid(ent, rows, targets.shape)
        logp = logp * mask
        ent = None if ent is None else ent * mask
        if self._vision is not None:
            logp = logp + zero.value  # ties the zero-weight vision passes to the loss
        return logp, ent

    @torch.no_grad()
    def log_probs(
        self, sequences: Sequence[TokenSequence], *, temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Per-sequence log-probs (each ``(R_i,)``, float32, on CPU), in order."""
        out: list[torch.Tensor | None] = [None] * len(sequences)
        # scoring samples no dropout (LoRA's, actor.lora.dropout): the update's passes do
        with _eval_mode(self.model):
            for mb in self.aligned(self.micro_batches(sequences, self.positions(sequences))):
                logp, _ = self.forward(mb, temperature=temperature)
                if mb.dummy:
                    continue
                for row, i in enumerate(mb.indices):
                    out[i] = logp[row, : len(sequences[i].response_ids)].detach().cpu()
        return out  # type: ignore[return-value]

    # -- offload ------------------------------------------------------------------------------------

    def parkable(self) -> dict[str, list[torch.Tensor | None]]:
        """What :meth:`offload` can park, by kind: the weights (with the buffers, and a 4-bit weight's
        quantisation constants, which are neither: QLoRA's absmax is an eighth of the packed bytes)."""
        params = list(self.model.parameters())
        states = [p.quant_state for p in params if lora.is_4bit(p)]
        constants = [t for st in states for t in (st.absmax, st.code)]
        return {"params": [*params, *self.model.buffers(), *constants]}

    def offload(self, kinds: Sequence[str] | None = None) -> dict[str, int]:
        """Park this rank's ``kinds`` (None: all of :meth:`parkable`) on the host until :meth:`reload`;
        returns the bytes freed by kind. Nothing collective: each rank for itself
        (services/trainer/offload.py). A colocated push parks the optimizer before the engine's weights
        wake and the weights after they were sent, so the kinds move one at a time."""
        tensors = self.parkable()
        unknown = set(kinds or ()) - set(tensors)
        if unknown:
            raise ValueError(f"nothing to offload called {sorted(unknown)}; kinds: {sorted(tensors)}")
        # only what lives on the compute device: shards FSDP already keeps on the host
        # (actor.offload_params / offload_reference, pinned) would free nothing there and be copied twice
        here = {
            k: [t for t in v if t is not None and local(t).device.type == self.device.type]
            for k, v in tensors.items()
        }
        return {k: self._host.setdefault(k, HostCopies()).park(here[k]) for k in (kinds or tensors)}

    def reload(self, kinds: Sequence[str] | None = None) -> int:
        """What :meth:`offload` parked (of ``kinds``; None: everything), back where it was, bit for bit;
        returns the bytes."""
        return sum(self._host[k].restore() for k in (kinds or list(self._host)) if k in self._host)

    def parked_kinds(self) -> list[str]:
        """The kinds :meth:`offload` parked that are still on the host."""
        return [k for k, copies in self._host.items() if copies.parked]

    @property
    def parked(self) -> bool:
        return bool(self.parked_kinds())

    # -- weights --------------------------------------------------------------------------------------

    def full_state_dict(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """Every tensor, gathered (all ranks must call; rank 0 gets the tensors, others an empty dict),
        floating ones cast to ``dtype`` (None: as stored, i.e. the master weights, for a checkpoint)."""
        if self.lora is not None:  # the merged weights, one at a time (all ranks gather each), kept
            out = {}  # on rank 0's host only: no rank holds the whole model on its device
            for key, whole in self.full_tensors(dtype):
                if self.rank == 0:
                    out[key] = whole.cpu()
                del whole
            return out
        if self.world_size == 1:
            return {k: _cast(v.detach(), dtype) for k, v in self.model.state_dict().items()}
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(
            self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        return {k: _cast(v, dtype) for k, v in state.items()} if self.rank == 0 else {}

    def full_tensors(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """The weights one full tensor at a time, as ``(checkpoint name, tensor cast to dtype)``, on
        this rank's device: for a sender that streams them in buckets instead of gathering the whole
        model. Under FSDP each tensor is all-gathered, so every rank must run the iterator to its end
        in step (every rank receives every tensor; rank 0 would usually be the one that sends)."""
        for name, value in self.push_state().items():
            yield name, _cast(_full(value), dtype)

    @staticmethod
    def gather(value: torch.Tensor) -> torch.Tensor:
        """One state-dict tensor whole (a collective for a sharded one: every rank calls)."""
        return _full(value)

    def push_state(self) -> dict[str, Any]:
        """The tensors the engine and a checkpoint's ``model/`` get, by state-dict key: the state dict,
        or with ``actor.lora`` its merged view (:func:`services.trainer.lora.merged_state`)."""
        return lora.push_state(self.model)

    def save_pretrained(self, folder: Path, dtype: torch.dtype | None = None) -> Path | None:
        """An HF-format checkpoint (weights as stored, or cast to ``dtype``; config, processor, chat template) that
        transformers and vLLM load, written by rank 0 to a temp folder and renamed into place; returns
        the folder on rank 0, None elsewhere. Every rank must call: the tensors are gathered one at a
        time and written as they come (``model.safetensors``, the names and order ``save_pretrained``
        would write), so no rank ever holds more than one whole tensor beside its shards."""
        from services.trainer.weight_buckets import cast_dtype
        from services.trainer.weight_files import SINGLE_FILE, save_plan, write_safetensors

        state = self.push_state()
        plan = save_plan(self.model, state)  # (model key, file key), in the file's order
        gathered = ((saved, _cast(_full(state[key]), dtype)) for key, saved in plan)
        if self.rank != 0:
            for _ in gathered:  # every all-gather rank 0 makes
                pass
            return None
        folder = Path(folder)
        tmp: Path | None = None
        try:
            try:
                folder.parent.mkdir(parents=True, exist_ok=True)
                for stale in folder.parent.glob(f".{folder.name}.*"):  # a killed save's temp (GBs each)
                    shutil.rmtree(stale, ignore_errors=True)
                tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
                layout = {
                    saved: (cast_dtype(state[key].dtype, dtype), tuple(state[key].shape))
                    for key, saved in plan
                }
                write_safetensors(tmp / SINGLE_FILE, layout, gathered)
            finally:
                # a failed folder or write (a full disk) still makes the all-gathers the other ranks
                # wait in; only a gather failing on this rank itself leaves them to the group's timeout
                for _ in gathered:
                    pass
            # what model.save_pretrained writes beside the weights (LoRA: the merged base's dtype)
            saved_dtype = dtype or (self.param_dtype if self.lora is None else self.compute_dtype)
            self.hf_config.dtype = str(saved_dtype).removeprefix("torch.")
            self.hf_config.architectures = [type(self.model).__name__.removeprefix("FSDP")]
            # QLoRA: the weights are written dequantised, so the config must not announce 4-bit ones
            quantized = self.hf_config.__dict__.pop("quantization_config", None)
            try:
                self.hf_config.save_pretrained(tmp)
            finally:
                if quantized is not None:
                    self.hf_config.quantization_config = quantized
            if self.model.can_generate():
                self.model.generation_config.save_pretrained(tmp)
            self.processor.save_pretrained(tmp)
            source = Path(self.config.model_path)
            for extra in ("generation_config.json", "chat_template.jinja"):
                if (source / extra).exists() and not (tmp / extra).exists():
                    shutil.copy2(source / extra, tmp / extra)
            if folder.exists():
                shutil.rmtree(folder)
            tmp.rename(folder)
        except BaseException:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        return folder


class VisionDummies:
    """Zero-weight passes through the vision tower for the modalities a micro-batch lacks.

    Under FSDP every forward gathers each unit's parameters collectively, so all ranks must run the same
    modules the same number of times, in the same order. The model runs its vision tower once for
    images, then once for videos, then the language model; a rank whose micro-batch has no images (or no
    videos, or neither) would skip a pass the others make and every rank would wait forever. So, just
    before the language model runs (inside the model's forward, where the root's parameters are
    gathered), each missing modality gets a pass over a one-token zero input, added to the logits with
    weight 0: every rank makes two vision passes per forward, every parameter takes part, and the
    gradients are unchanged.
    """

    MODALITIES = (("pixel_values", "image_grid_thw"), ("pixel_values_videos", "video_grid_thw"))

    def __init__(self, model: Any, dtype: torch.dtype) -> None:
        inner = model.model
        self.visual = getattr(inner, "visual", None)
        self.language = getattr(inner, "language_model", None)
        if self.visual is None or self.language is None:
            raise ValueError(f"{type(model).__name__} has no visual/language_model pair to keep in step")
        vc = model.config.vision_config
        channels = getattr(vc, "in_channels", None) or getattr(vc, "in_chans", 3)
        merge = vc.spatial_merge_size
        width = channels * vc.temporal_patch_size * vc.patch_size**2
        # one merged token: a 1 x merge x merge grid of patches
        self.pixels = torch.zeros(merge * merge, width, dtype=dtype)
        self.grid = torch.tensor([[1, merge, merge]], dtype=torch.long)

    def around(self, inputs: dict[str, Any]) -> _DummyPasses:
        missing = sum(1 for rows, _ in self.MODALITIES if inputs.get(rows) is None)
        return _DummyPasses(self, missing)


class _DummyPasses:
    """Context for one forward: a pre-hook on the language model runs ``count`` dummy vision passes and
    keeps their zero-weighted sum in ``value`` (a 0-dim tensor tied to the vision parameters)."""

    def __init__(self, owner: VisionDummies, count: int) -> None:
        self.owner, self.count = owner, count
        self.value: torch.Tensor | float = 0.0
        self._handle: Any = None

    def _run(self, *_: Any) -> None:
        visual = self.owner.visual
        device = next(visual.parameters()).device
        pixels, grid = self.owner.pixels.to(device), self.owner.grid.to(device)
        total = torch.zeros((), device=device)
        for _ in range(self.count):
            total = total + _tensor_sum(visual(pixels, grid_thw=grid))
        self.value = total * 0.0

    def __enter__(self) -> _DummyPasses:
        if self.count:
            self._handle = self.owner.language.register_forward_pre_hook(self._run)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            self._handle.remove()


@contextlib.contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    """``model`` in eval mode for the duration (dropout off), its mode before restored after."""
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)


def _device_index(device: torch.device) -> int | str:
    """``device`` as a ``device_map`` names it: a CUDA device by its index (the current one when it
    names none), another by its type."""
    if device.type == "cuda":
        return torch.cuda.current_device() if device.index is None else device.index
    return device.type


def _cast(value: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """``value`` in ``dtype`` when it is floating (integer buffers keep theirs)."""
    if dtype is None or not value.is_floating_point() or value.dtype == dtype:
        return value
    return value.to(dtype)


def _to_grid(values: torch.Tensor, rows: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """(N,) scores of the real tokens into the (B, R) grid at their row-major positions ``rows``, 0
    elsewhere (differentiable: the gradient flows back to the scored ones)."""
    return values.new_zeros(shape.numel()).index_copy(0, rows, values).view(shape)


def _full(value: torch.Tensor) -> torch.Tensor:
    """The whole of a state-dict tensor: a sharded one (DTensor) all-gathered, which every rank must do.
    A shard kept on the host (``actor.offload_params``) travels through the collective's device:
    NCCL gathers CUDA tensors only."""
    if isinstance(value, lora.MergedWeight | lora.Dequantized):  # W + scale·B·A / a 4-bit W unpacked
        return value.full_tensor(_full)
    if not hasattr(value, "full_tensor"):
        return value.detach()
    device = collective_device()
    if value.device != device:
        from torch.distributed.tensor import DTensor

        value = DTensor.from_local(value.to_local().to(device), value.device_mesh, value.placements)
    return value.full_tensor().detach()


def _tensor_sum(out: Any) -> torch.Tensor:
    """Sum of every floating tensor in a vision tower's output (a tensor, tuple, list or model output):
    each output must reach the loss, or its branch's parameters would get no gradient."""
    if isinstance(out, torch.Tensor):
        return out.float().sum() if out.is_floating_point() else torch.zeros((), device=out.device)
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, (tuple, list)):
        parts = [_tensor_sum(o) for o in out if o is not None]
        return sum(parts[1:], parts[0]) if parts else torch.zeros(())
    return torch.zeros(())


class Actor(PolicyModel):
    """The trained policy: AdamW, lr schedule, gradient clipping, gradient accumulation."""

    def __init__(
        self, config: ActorConfig, *, total_steps: int, device: str | None = None, adapter: Path | None = None
    ) -> None:
        super().__init__(config, trainable=True, device=device, adapter=adapter)
        self._moments = HostCopies()  # AdamW's moments between steps (actor.offload_optimizer)
        optim = config.optim
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=optim.lr, betas=optim.betas, eps=optim.eps, weight_decay=optim.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: lr_lambda(
                s,
                warmup=optim.warmup_steps,
                total=total_steps,
                schedule=optim.schedule,
                min_ratio=optim.min_lr_ratio,
            ),
        )

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def set_lr(self, lr: float) -> None:
        """Fix the lr of every group (used by the supervised warm start, before RL's schedule)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
            group["initial_lr"] = lr

    def step_optimizer(self) -> float:
        """Clip, step, zero; returns the global gradient norm before clipping. With
        ``actor.offload_optimizer`` AdamW's moments come in from the host for the step and go back."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        clip = self.config.optim.grad_clip
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip is not None else float("inf"))
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        norm_value = float(norm)
        self._moments.restore()
        if math.isfinite(norm_value):
            self.optimizer.step()
        else:
            log.warning("non-finite gradient norm %s: update skipped", norm_value)
        self.optimizer.zero_grad(set_to_none=True)
        self.moments_home()
        return norm_value

    def moments_home(self) -> None:
        """With ``actor.offload_optimizer``, AdamW's moments back to the host, where they live between
        optimizer steps (after a step, a checkpoint's read of them, a resume)."""
        if self.config.offload_optimizer:
            self._moments.park(optimizer_tensors(self.optimizer))

    def parkable(self) -> dict[str, list[torch.Tensor | None]]:
        """The weights, the gradients (if any are held) and AdamW's moments: what a colocated engine's
        generation needs the device without (:meth:`PolicyModel.offload`)."""
        return {
            **super().parkable(),
            "grads": [p.grad for p in self.model.parameters()],
            "optimizer": optimizer_tensors(self.optimizer),
        }

    def state(self) -> dict[str, Any]:
        """Optimizer and scheduler state (sharded per rank under FSDP); the moments are brought back
        from the host first: the returned dict holds them, so the caller sends them home
        (:meth:`moments_home`) once it has written them."""
        self._moments.restore()
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state(self, state: dict[str, Any]) -> None:
        self._moments.restore()
        self.optimizer.load_state_dict(state["optimizer"])
        own_optimizer_state(self.optimizer)  # parkable (offload_optimizer, a colocated engine's turn)
        self.scheduler.load_state_dict(state["scheduler"])
        self.moments_home()
