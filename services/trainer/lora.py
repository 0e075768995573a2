"""LoRA adapters on the actor (``actor.lora``): peft's LoRA layers injected into the model in place, the
base weights frozen, only the adapters trained.

- **Injection** (:func:`inject`): peft's ``inject_adapter_in_model`` wraps each targeted ``nn.Linear``
  (``q_proj`` … ``down_proj`` of the language model; the vision tower's blocks too with
  ``actor.lora.vision``) in a LoRA layer whose ``base_layer`` is the original. The model keeps its own
  class and module paths, so everything that hooks into it (packing, the shared vision pass, Ulysses,
  the chunked LM head) runs unchanged. Injected before FSDP2 shards the model, the adapters are
  sharded with it (below, why).
- **Initial values** (:func:`init_adapters`): each A from a generator seeded by its name (peft's
  Kaiming-uniform rule), each B zero, computed whole and sliced for a sharded parameter, so one rank
  and N ranks start from the same adapters.
- **The reference without a second copy** (:func:`adapters_disabled`): the same model with every LoRA
  layer bypassed is the base model, verl's way of computing KL's reference log-probs under LoRA.
- **What the engine and a checkpoint's ``model/`` get** (:func:`merged_state`): the model's tensors
  under the checkpoint's own names, each adapted weight merged (W + scale · B·A, computed when asked
  for, one tensor at a time, in fp32 and cast back), the adapters left out. The push, the bucket
  streams and ``save_pretrained`` read this instead of ``state_dict()``, so vLLM loads a plain
  checkpoint-shaped model; nothing in the rollout engine knows about LoRA.
- **QLoRA** (``actor.lora.quantize: 4bit``; :func:`check_quantize`, :func:`quantization`): the
  language model's linear layers load in bitsandbytes' NF4, everything in :data:`UNQUANTISED` and the
  embeddings in the compute dtype; peft wraps the 4-bit layers as it wraps plain ones. The merged view
  gives each 4-bit weight as :class:`Dequantized` (its true shape, never the packed one), so the push,
  ``model/`` and export carry plain tensors. One rank only (why: :func:`check_quantize`).

Why sharded adapters, not replicated: FSDP2 then reduces their gradients with the rest, every rank
steps 1/N of their AdamW state, and checkpoints, offload and the optimizer need no second path; a
replicated adapter would need its own all-reduce. Their all-gathers are small (rank × width).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from services.trainer.config import qlora_ranks_problem

ADAPTER = "default"  # peft's adapter name: one adapter per model
BASE = ".base_layer"
#: every linear layer of a vision block, in each family: attention (qkv, proj) and MLP (Qwen2-VL's
#: fc1/fc2, Qwen2.5-VL's gate/up/down, Qwen3-VL's and Qwen3.5's linear_fc1/linear_fc2); the mergers
#: lie outside the blocks and stay the base's
VISION_TARGETS = (
    "qkv",
    "proj",
    "fc1",
    "fc2",
    "gate_proj",
    "up_proj",
    "down_proj",
    "linear_fc1",
    "linear_fc2",
)


def _scope(prefix: str, names: Any) -> str:
    return rf"{prefix}\..*\.(?:{'|'.join(sorted(set(names)))})"


def peft_config(lora: Any) -> Any:
    """peft's ``LoraConfig`` for ``actor.lora``: the named projections of the language model, and every
    linear layer of the vision tower's blocks when ``lora.vision``, as one regex over module paths (the
    tower's MLP reuses the language model's names in some families, so a bare name list would adapt it
    whatever ``vision`` says)."""
    from peft import LoraConfig

    scopes = [_scope(r"model\.language_model", lora.target_modules)]
    if lora.vision:
        scopes.append(_scope(r"model\.visual\.blocks", VISION_TARGETS))
    return LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=rf"^(?:{'|'.join(scopes)})$",
        bias="none",
    )


def inject(model: Any, lora: Any, dtype: torch.dtype) -> list[str]:
    """Wrap the targeted linear layers of ``model`` in LoRA layers (in place) whose adapters are stored
    in ``dtype``, freeze every other parameter, and return the adapted modules' paths. Raises when
    nothing matched ``lora``'s targets."""
    from peft import inject_adapter_in_model

    config = peft_config(lora)
    pattern = re.compile(config.target_modules)
    if not any(isinstance(m, torch.nn.Linear) and pattern.fullmatch(n) for n, m in model.named_modules()):
        raise ValueError(
            f"actor.lora.target_modules {list(lora.target_modules)} matched no linear layer of the "
            f"{'language model or vision tower' if lora.vision else 'language model'} (e.g. q_proj, up_proj)"
        )
    model.requires_grad_(False)
    # a model still on meta (sharded loading) gets its adapters on meta too, allocated with the rest
    on_meta = any(p.is_meta for p in model.parameters())
    inject_adapter_in_model(config, model, adapter_name=ADAPTER, low_cpu_mem_usage=on_meta)
    adapted = [name for name, module in model.named_modules() if _is_lora(module)]
    for name, param in model.named_parameters():
        param.requires_grad_(is_adapter(name))
        if is_adapter(name):
            param.data = param.data.to(dtype)  # on meta too: the shard is allocated in this dtype
    return adapted


#: what QLoRA leaves unquantised besides the embeddings (never a Linear): the vision tower (its own
#: few hundred million parameters see every video patch, and its mergers feed the language model) and
#: the LM head (QLoRA's rule: the head's logits are the policy's log-probs); module-path prefixes, as
#: transformers' ``llm_int8_skip_modules`` matches them
UNQUANTISED = ("model.visual", "lm_head")


def check_quantize(lora: Any, device: torch.device, world_size: int = 1) -> None:
    """QLoRA (``actor.lora.quantize: 4bit``) runs where bitsandbytes' NF4 kernels do: one tiny tensor is
    quantised and dequantised on ``device`` (CUDA, and the CPU since bitsandbytes 0.49), and anything
    that fails is refused with the reason rather than trained unquantised. One rank only: FSDP2 would
    shard bitsandbytes' packed ``Params4bit`` as plain bytes and lose their quantisation state."""
    if lora.quantize is None:
        return
    problem = qlora_ranks_problem(lora, world_size)
    if problem:
        raise ValueError(problem)
    try:
        import bitsandbytes.functional as bnb
    except ImportError as exc:
        raise ValueError(
            f"actor.lora.quantize={lora.quantize} needs bitsandbytes (pinned in the trainer extra; run "
            f"scripts/bootstrap.sh): {exc}"
        ) from exc
    probe = torch.linspace(-1.0, 1.0, 64 * 64, device=device).reshape(64, 64)
    try:
        packed, state = bnb.quantize_4bit(probe, quant_type="nf4")
        # NF4's widest gap between levels is 0.304 of a block's absmax (1 here): no value moves more
        # than half of it
        error = float((bnb.dequantize_4bit(packed, state).float() - probe).abs().max())
    except Exception as exc:  # whatever a backend raises: refused with its reason, not a traceback
        raise ValueError(
            f"actor.lora.quantize={lora.quantize}: bitsandbytes' 4-bit NF4 kernels do not run on "
            f"{device.type} here ({type(exc).__name__}: {exc}); drop quantize (plain LoRA) on this machine"
        ) from exc
    if not error <= 0.16:
        raise ValueError(
            f"actor.lora.quantize={lora.quantize}: bitsandbytes' NF4 round trip on {device.type} is off by "
            f"{error:g} (at most 0.152 expected); drop quantize (plain LoRA) on this machine"
        )


def run_identity(actor: Any) -> dict[str, Any] | None:
    """``actor.lora`` as a checkpoint records it (None: full tuning). QLoRA adds the dtype the base was
    quantised from (``quantized_from``: the compute dtype it loaded in): NF4 of a bf16 load and of an
    fp32 load differ in their last bits, so a resume must load it the same way (refused otherwise) and
    ``export --merge`` re-quantises it as training did."""
    if actor.lora is None:
        return None
    identity = actor.lora.model_dump(mode="json")
    if actor.lora.quantize is not None:
        identity["quantized_from"] = actor.compute_dtype
    return identity


def rounds_the_base(lora: Any) -> bool:
    """Whether the actor's base differs from the checkpoint an engine starts from (QLoRA: NF4-rounded),
    so the engine must take the actor's weights before its first rollout."""
    return lora is not None and lora.quantize is not None


def quantization(compute_dtype: torch.dtype) -> Any:
    """transformers' ``BitsAndBytesConfig`` of QLoRA: every linear layer of the language model in NF4
    (4-bit NormalFloat, blocks of 64 with an fp32 absmax each), dequantised to ``compute_dtype`` for each
    matmul; :data:`UNQUANTISED` and the embeddings stay in ``compute_dtype``."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=compute_dtype,
        bnb_4bit_use_double_quant=False,
        llm_int8_skip_modules=list(UNQUANTISED),
    )


def one_layout(model: Any) -> None:
    """Keep every 4-bit weight of ``model`` in NF4's one packed layout: on a CPU with AVX512-BF16,
    bitsandbytes repacks a weight in place for its inference kernel on the first eval forward without
    gradients (``packing_format_for_cpu``; scoring is one), a layout its training matmul fails on and
    ``dequantize_4bit`` (the push) does not read. Switched off per layer, so scoring, the update and the
    push all read the same bytes."""
    for module in model.modules():
        if is_4bit(module._parameters.get("weight")) and hasattr(module, "support_avx512bf16_for_cpu"):
            module.support_avx512bf16_for_cpu = False


def is_4bit(tensor: Any) -> bool:
    """Whether ``tensor`` is a bitsandbytes 4-bit weight (packed bytes plus its ``quant_state``)."""
    return getattr(tensor, "quant_state", None) is not None


def _is_lora(module: Any) -> bool:
    return hasattr(module, "lora_A") and hasattr(module, "base_layer")


def is_adapter(key: str) -> bool:
    """Whether a parameter or state-dict key is an adapter's (``…q_proj.lora_A.default.weight``): in
    no checkpoint, the only thing trained."""
    return ".lora_" in key


def lora_layers(model: Any) -> list[tuple[str, Any]]:
    return [(name, module) for name, module in model.named_modules() if _is_lora(module)]


def has_adapters(model: Any) -> bool:
    return any(_is_lora(m) for m in model.modules())


def adapter_names(model: Any) -> list[str]:
    """The adapters' state-dict keys (``…q_proj.lora_A.default.weight``), in state-dict order."""
    return [k for k in model.state_dict() if is_adapter(k)]


def init_adapters(model: Any, dtype: torch.dtype) -> None:
    """Every adapter to its initial value, in ``dtype``: A Kaiming-uniform (a = √5, peft's rule) from a
    generator seeded by its name, B zero. Computed whole and sliced where the parameter is sharded, so
    any number of ranks starts from the same adapters. Parameters on meta are allocated first."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not is_adapter(name):
                continue
            shape = tuple(param.shape)
            if ".lora_A." in name:
                generator = torch.Generator().manual_seed(_seed(name))
                bound = 1.0 / math.sqrt(shape[1]) if len(shape) > 1 else 0.0  # kaiming_uniform_(a=√5)
                whole = torch.empty(shape, dtype=torch.float32).uniform_(-bound, bound, generator=generator)
            else:
                whole = torch.zeros(shape, dtype=torch.float32)
            _assign(param, whole.to(dtype))


def _seed(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:7], "big")


def _assign(param: torch.Tensor, whole: torch.Tensor) -> None:
    """``whole`` into ``param``: this rank's slice of it for a DTensor, all of it otherwise."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    if isinstance(param, DTensor):
        local = param.to_local()
        part, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
        if local.numel():
            index = tuple(slice(o, o + n) for o, n in zip(offset, part, strict=True))
            local.copy_(whole[index])
        return
    param.copy_(whole)


@contextlib.contextmanager
def adapters_disabled(model: Any) -> Iterator[None]:
    """``model`` as its base for the duration: every LoRA layer bypassed. The layers' own switch
    (``_disable_adapters``, what peft's ``disable_adapters`` property reads) is flipped rather than
    peft's ``enable_adapters``, which also flips the adapters' ``requires_grad`` (FSDP2 keeps its
    gradient bookkeeping by that flag)."""
    layers = [m for _, m in lora_layers(model)]
    before = [m._disable_adapters for m in layers]
    for m in layers:
        m._disable_adapters = True
    try:
        yield
    finally:
        for m, was in zip(layers, before, strict=True):
            m._disable_adapters = was


# -- the merged view ------------------------------------------------------------------------------------


class MergedWeight:
    """An adapted weight as the engine must see it, W + scale · B·A, made when :meth:`full_tensor` is
    called (every rank must call it together when the tensors are sharded: it gathers W, A and B).
    Knows its shape and dtype without gathering (a push's manifest). W may be a :class:`Dequantized`
    4-bit base (QLoRA)."""

    def __init__(self, base: Any, a: torch.Tensor, b: torch.Tensor, scale: float) -> None:
        self.base, self.a, self.b, self.scale = base, a, b, float(scale)
        self.shape, self.dtype = base.shape, base.dtype

    def full_tensor(self, gather: Any = None) -> torch.Tensor:
        """``gather``: how each part is made whole (default: ``full_tensor()`` of a DTensor or a
        :class:`Dequantized`, a plain tensor as it is)."""
        gather = gather or _whole
        with torch.no_grad():
            base = gather(self.base).detach()
            delta = gather(self.b).detach().float() @ gather(self.a).detach().float()
            return (base.float() + self.scale * delta).to(base.dtype)


class Dequantized:
    """A 4-bit NF4 base weight (bitsandbytes' ``Params4bit``: packed bytes of shape (out·in/2, 1) and a
    ``quant_state``) as the engine and a checkpoint must see it: the (out, in) tensor in the dtype it was
    quantised from, made when :meth:`full_tensor` is called. ``shape`` and ``dtype`` are the true ones
    (the push's manifest and ``save_plan`` read them), never the packed ones."""

    def __init__(self, param: torch.Tensor) -> None:
        self.param = param
        state = param.quant_state
        self.shape, self.dtype = torch.Size(state.shape), state.dtype

    def full_tensor(self, gather: Any = None) -> torch.Tensor:
        """The dequantised weight (one rank: nothing to gather, ``gather`` is not used)."""
        from bitsandbytes.functional import dequantize_4bit

        with torch.no_grad():
            return dequantize_4bit(self.param.data, self.param.quant_state).to(self.dtype)


def _whole(tensor: Any) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def merged_state(model: Any) -> dict[str, Any]:
    """``model``'s state dict under its names before injection: each LoRA layer's ``base_layer.weight``
    as a :class:`MergedWeight` named ``….weight``, its base bias as ``….bias``, the adapters left out;
    every other tensor as it is. A 4-bit weight (QLoRA) is its :class:`Dequantized` view, and the
    quantisation state bitsandbytes adds to the state dict (``….weight.absmax``, ``.quant_map``,
    ``.quant_state.bitsandbytes__nf4``) is left out. The order is the state dict's (a layer's tensors
    together)."""
    layers = dict(lora_layers(model))
    quantized = {
        name: m._parameters["weight"]
        for name, m in model.named_modules()
        if is_4bit(m._parameters.get("weight"))
    }
    out: dict[str, Any] = {}
    for key, value in model.state_dict().items():
        if is_adapter(key):
            continue
        if quantized:
            holder, dot_weight, rest = key.partition(".weight")
            if dot_weight and holder in quantized:
                if rest:  # the packed weight's quantisation state: in no checkpoint
                    continue
                value = Dequantized(quantized[holder])
        if BASE + "." not in key:
            out[key] = value
            continue
        owner, _, leaf = key.rpartition(BASE + ".")
        name = original_name(key)
        module = layers.get(owner)  # state-dict keys are module paths (FSDP2 adds no wrapper names)
        if leaf == "weight" and module is not None and ADAPTER in module.lora_A:
            a, b = module.lora_A[ADAPTER].weight, module.lora_B[ADAPTER].weight
            out[name] = MergedWeight(value, a, b, module.scaling[ADAPTER])
        else:
            out[name] = value
    return out


def original_name(key: str) -> str:
    """A state-dict key as the checkpoint names it: ``….q_proj.base_layer.weight`` → ``….q_proj.weight``."""
    return key.replace(BASE + ".", ".")


def adapter_state(model: Any) -> dict[str, torch.Tensor]:
    """The adapters' tensors (sharded ones as they are: gather with ``full``), by state-dict key."""
    return {k: v for k, v in model.state_dict().items() if is_adapter(k)}


def push_state(model: Any) -> dict[str, Any]:
    """What a push or a checkpoint's ``model/`` reads of ``model``: its state dict, or, with adapters,
    the merged view (:func:`merged_state`), a tied weight once (:func:`tied_copies` left out)."""
    state = merged_state(model) if has_adapters(model) or _quantized(model) else model.state_dict()
    # A tied LM head (``tie_word_embeddings``) is the input embeddings' tensor under a second name. The
    # engine ties it itself (vLLM builds its head on the embeddings' storage, which loading the
    # embeddings fills) and a checkpoint's files leave it out, so carrying it would only all-gather the
    # largest tensor of a small model a second time and send its bytes twice.
    copies = tied_copies(model)
    return {k: v for k, v in state.items() if k not in copies} if copies else state


def _quantized(model: Any) -> bool:
    return any(is_4bit(p) for p in model.parameters())


def tied_copies(model: Any) -> frozenset[str]:
    """State-dict names of weights that are another one's tensor: those transformers declares tied
    (``all_tied_weights_keys``, name → the name it is tied to; the names a weight push may leave out,
    ``services.rollout.param_names``) where the model really holds one parameter under both, so a head
    that loading left untied (its checkpoint held two different tensors) is still carried."""
    declared = getattr(model, "all_tied_weights_keys", None) or {}
    params = dict(model.named_parameters(remove_duplicate=False))
    return frozenset(
        name
        for name, source in declared.items()
        if name in params and source in params and params[name] is params[source]
    )


# -- adapter files (peft's format: ``adapter_config.json`` + ``adapter_model.safetensors``) ------------

ADAPTER_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
_PEFT_PREFIX = "base_model.model."


def file_key(key: str) -> str:
    """A state-dict key as peft's adapter files name it: ``…q_proj.lora_A.default.weight`` →
    ``base_model.model.…q_proj.lora_A.weight`` (what ``PeftModel.from_pretrained`` loads)."""
    return _PEFT_PREFIX + key.replace(f".{ADAPTER}.", ".")


def save_adapter(model: Any, folder: Path, lora: Any, base: str, *, rank: int, gather: Any) -> None:
    """The adapters into ``folder`` in peft's format, written by rank 0 (every rank must call: each
    adapter is gathered with ``gather``). ``base``: the base model's path, recorded in the config."""
    from safetensors.torch import save_file

    tensors = {file_key(k): gather(v).detach().cpu().contiguous() for k, v in adapter_state(model).items()}
    if rank != 0:
        return
    folder.mkdir(parents=True, exist_ok=True)
    config = peft_config(lora)
    config.base_model_name_or_path = str(Path(base).resolve())  # an export may run from elsewhere
    config.save_pretrained(str(folder))
    save_file(tensors, str(folder / ADAPTER_FILE), metadata={"format": "pt"})


def load_adapter(model: Any, folder: Path) -> None:
    """The adapters of ``folder`` (written by :func:`save_adapter`) into ``model``'s, each rank its
    slice. Raises naming what is missing, extra or of another shape."""
    from safetensors.torch import load_file

    path = Path(folder) / ADAPTER_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no adapter weights (a LoRA checkpoint holds adapter/{ADAPTER_FILE})"
        )
    stored = load_file(str(path))
    wanted = {file_key(k): k for k in adapter_state(model)}
    missing, extra = sorted(set(wanted) - set(stored)), sorted(set(stored) - set(wanted))
    if missing or extra:
        raise ValueError(
            f"{path}: the adapters do not fit this model (missing {missing[:3]}, unexpected {extra[:3]}); "
            "was it written with another actor.lora (rank, target_modules, vision)?"
        )
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, key in wanted.items():
            param = params[key]
            if tuple(stored[name].shape) != tuple(param.shape):
                raise ValueError(
                    f"{path}: {name} has shape {tuple(stored[name].shape)}, the model's {tuple(param.shape)}"
                )
            _assign(param, stored[name].to(param.dtype))
