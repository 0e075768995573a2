"""Pushing a trainer's weights into a running vLLM engine.

Two transports, both ending in vLLM's in-place ``reload_weights`` on every worker (which re-packs the
CPU backend's linear layers; calling ``model.load_weights`` directly leaves parameters of shape (0,)),
fed the tensors by :class:`WeightSyncExtension`:
- file: the state dict is written as safetensors to a private folder and each worker reads it; the
  folder is removed after the push. The folder lives under ``$REELRL_WEIGHTS_DIR`` when set, else under
  /dev/shm when it exists and has room for the payload (so it never touches a disk), else under the
  system temp directory;
- bytes: the safetensors bytes travel in the RPC and :class:`WeightSyncExtension` loads them.
Tensors themselves cannot travel in RPC arguments (they arrive as lists).

A third way never holds the whole model: :class:`WeightBuckets` (``rollout.weight_bucket_mb``) announce
every (name, shape) first, checked before anything is sent, then travel as one safetensors RPC per
bucket into a single in-place reload that spans the RPCs (``reelrl_begin_buckets`` ..
``reelrl_end_buckets``); vLLM processes each layer once all of its tensors have arrived.

Every push is checked against the checkpoint's parameter names first (:mod:`services.rollout.param_names`):
vLLM would otherwise keep the old value of each tensor it was not given, without an error.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from services.rollout.param_names import (
    ParameterNames,
    folder_names,
    safetensors_files,
    safetensors_header_names,
)

SHM = Path("/dev/shm")
WEIGHTS_DIR_ENV = "REELRL_WEIGHTS_DIR"
# safetensors adds a JSON header (~100 bytes a tensor); keep this much room on top of the tensor bytes
HEADER_MARGIN = 1 << 20
WEIGHTS_FILE = "model.safetensors"
EXTENSION = "services.rollout.weight_sync.WeightSyncExtension"


def checkpoint_tensors(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous CPU tensors under checkpoint names; tensors sharing storage (tied weights) are copied,
    since safetensors refuses shared storage."""
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for name, tensor in state_dict.items():
        value = tensor.detach().to("cpu").contiguous()
        ident = (value.untyped_storage().data_ptr(), value.storage_offset())
        if ident in seen:
            value = value.clone()
        seen.add((value.untyped_storage().data_ptr(), value.storage_offset()))
        out[name] = value
    return out


def safetensors_bytes(state_dict: Mapping[str, torch.Tensor]) -> bytes:
    from safetensors.torch import save

    return save(checkpoint_tensors(state_dict))


def payload_bytes(state_dict: Mapping[str, torch.Tensor]) -> int:
    """Bytes the tensors of ``state_dict`` take in a safetensors file, header aside."""
    return sum(t.numel() * t.element_size() for t in state_dict.values())


def weights_dir(
    size: int,
    environ: Mapping[str, str] = os.environ,
    shm: Path = SHM,
    free: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free,
) -> Path:
    """Where the file transport writes a payload of ``size`` bytes: ``$REELRL_WEIGHTS_DIR`` if set (the
    operator's choice, used as is), else /dev/shm if it exists with room for it, else the temp dir."""
    if environ.get(WEIGHTS_DIR_ENV):
        return Path(environ[WEIGHTS_DIR_ENV])
    if shm.is_dir() and free(shm) >= size + HEADER_MARGIN:
        return shm
    return Path(tempfile.gettempdir())


@contextmanager
def weights_folder(state_dict: Mapping[str, torch.Tensor]) -> Iterator[Path]:
    """A temporary folder holding ``state_dict`` as one safetensors file; removed on exit."""
    from safetensors.torch import save_file

    parent = weights_dir(payload_bytes(state_dict))
    folder = Path(tempfile.mkdtemp(prefix="reelrl-weights-", dir=parent))
    try:
        save_file(checkpoint_tensors(state_dict), folder / WEIGHTS_FILE)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


TRANSPORTS = ("file", "bytes")


class ReloadCall(NamedTuple):
    """A worker RPC that loads weights, and how many tensors it carries."""

    method: str
    args: tuple
    kwargs: dict[str, Any]
    tensors: int


@contextmanager
def reload_call(
    weights: Weights, transport: str = "file", expected: ParameterNames | None = None
) -> Iterator[ReloadCall]:
    """The worker RPC that loads ``weights``; valid inside the ``with``.

    ``weights``: a state dict under checkpoint names (the HF model's ``state_dict()``), the bytes of
    a safetensors file, or a folder of safetensors files. A state dict travels by ``transport``.
    With ``expected``, the tensor names are checked before anything is serialised or sent (ValueError
    naming missing and unexpected names).
    """
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown weight transport {transport!r}; use one of {TRANSPORTS}")
    if isinstance(weights, str | Path):
        names = folder_names(weights) if expected is not None else []
        what = f"weights folder {weights}"
    elif isinstance(weights, bytes):
        names = safetensors_header_names(weights)
        what = "safetensors bytes"
    else:
        names = list(weights)
        what = "state dict"
    if expected is not None:
        expected.check(names, what)
    if isinstance(weights, str | Path):
        yield ReloadCall("reelrl_reload_from_folder", (str(weights),), {}, len(folder_names(weights)))
    elif isinstance(weights, bytes):
        yield ReloadCall("reelrl_reload_from_bytes", (weights,), {}, len(names))
    elif transport == "bytes":
        yield ReloadCall("reelrl_reload_from_bytes", (safetensors_bytes(weights),), {}, len(names))
    else:
        with weights_folder(weights) as folder:
            yield ReloadCall("reelrl_reload_from_folder", (str(folder),), {}, len(names))


def check_reload_results(call: ReloadCall, results: Sequence[Any]) -> None:
    """Each worker that reports a count (every method of :class:`WeightSyncExtension` does; vLLM's own
    ``reload_weights`` returns None) must have loaded every tensor sent."""
    for rank, loaded in enumerate(results):
        if loaded is not None and loaded != call.tensors:
            raise RuntimeError(
                f"worker {rank} loaded {loaded} tensors of the {call.tensors} pushed ({call.method}); "
                "its weights are now a mix of old and new: push again"
            )


Shapes = Mapping[str, tuple[int, ...]]


@dataclass(frozen=True)
class WeightBuckets:
    """A push in bounded buckets (``services.trainer.weight_buckets``): ``announced`` holds every (name,
    full shape) in push order, ``open()`` starts a fresh pass over the buckets (each engine of a fleet
    takes its own; an engine restarted later takes one too), ``nbytes`` is what the tensors weigh."""

    announced: tuple[tuple[str, tuple[int, ...]], ...]
    open: Callable[[], Iterator[Mapping[str, torch.Tensor]]]
    nbytes: int = 0


@dataclass(frozen=True)
class BucketRefs:
    """A bucketed push for engines in other Ray actors: ``refs`` yields, one at a time, an object
    reference to each bucket as the actor ranks make it (rank 0's; every rank gathers its share), and
    makes the next only when asked. One pass, shared by every engine of a fleet: each bucket reaches
    every engine before the next is made, so the object store holds one bucket at a time and nothing
    passes through the driver. ``announced``: every (name, full shape), in push order."""

    announced: tuple[tuple[str, tuple[int, ...]], ...]
    refs: Iterator[Any]
    nbytes: int = 0


@dataclass(frozen=True)
class BucketBroadcast:
    """A bucketed push for engines in other Ray actors over a weight-broadcast group
    (``services.rollout.weight_group``): rank 0 of the actor and every worker of every engine, one
    broadcast per bucket. Unlike ``BucketRefs`` it can be pushed again (each push is a new pass of the
    ranks over their current parameters), so a fleet re-sends it to a replacement or after a broken
    group. ``buckets``: each bucket's slots (name, shape, dtype name), the announced tensors in order.
    The callables drive the sending side (the actor ranks): ``address()`` a free "host:port" on rank 0's
    node; ``connect(address, world)`` starts rank 0's join and returns a wait; ``open()`` starts a pass,
    ``send(k)`` starts bucket k on every rank (rank 0 broadcasts it) and returns a wait that raises a
    rank's error; ``close()`` ends the pass. ``sender`` names rank 0's process; the wait of
    ``connect`` returns the new group's token and ``group()`` the token of the group rank 0 holds now
    (None: none, or it broke): a fleet forms the group again when either changed."""

    announced: tuple[tuple[str, tuple[int, ...]], ...]
    buckets: tuple[tuple[tuple[str, tuple[int, ...], str], ...], ...]
    sender: str
    backend: str
    timeout_s: float
    address: Callable[[], str]
    connect: Callable[[str, int], Callable[[], str]]
    group: Callable[[], str | None]
    open: Callable[[], Any]
    send: Callable[[int], Callable[[], Any]]
    close: Callable[[], Any]
    nbytes: int = 0

    def __post_init__(self) -> None:
        # checked before any group forms: a receiver refusing a bucket mid-push would break the group
        carried = [(name, tuple(shape)) for bucket in self.buckets for name, shape, _ in bucket]
        if carried != [(name, tuple(shape)) for name, shape in self.announced]:
            raise ValueError("the weight buckets do not carry the announced tensors, in order")


Weights = Mapping[str, torch.Tensor] | bytes | str | Path | WeightBuckets | BucketRefs | BucketBroadcast


_SHAPES: dict[tuple[str, str], dict[str, tuple[int, ...]]] = {}


def checkpoint_shapes(checkpoint: Any) -> Shapes:
    """Each tensor's shape in the checkpoint's HF ``state_dict()`` (a model built on the meta device: no
    memory; computed once per checkpoint and config)."""
    key = (str(checkpoint.path), checkpoint.hf_config.to_json_string())
    if key not in _SHAPES:
        from transformers import AutoModelForImageTextToText

        with torch.device("meta"):
            model = AutoModelForImageTextToText.from_config(checkpoint.hf_config)
        _SHAPES[key] = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    return _SHAPES[key]


def check_announced(
    announced: Sequence[tuple[str, tuple[int, ...]]], expected: ParameterNames, shapes: Shapes
) -> None:
    """Refuse a bucketed push whose announced names or shapes are not the checkpoint's (ValueError;
    nothing was sent). Names of the checkpoint's other layout (its files') have no shape here."""
    expected.check([name for name, _ in announced], "announced weight buckets")
    wrong = [(n, tuple(s), shapes[n]) for n, s in announced if n in shapes and tuple(s) != tuple(shapes[n])]
    if wrong:
        raise ValueError(
            f"{len(wrong)} announced tensors have the wrong shape (e.g. {wrong[:3]} as name, pushed, "
            "checkpoint); nothing was pushed"
        )


def check_bucket(bucket: Mapping[str, torch.Tensor], planned: Sequence[tuple[str, tuple[int, ...]]]) -> None:
    """A bucket must hold exactly the next planned tensors, in order, with the planned shapes."""
    got = [(name, tuple(t.shape)) for name, t in bucket.items()]
    if got != list(planned):
        diff = next((f"{g} != {p}" for g, p in zip(got, planned, strict=False) if g != p), "")
        raise ValueError(
            f"weight bucket of {len(got)} tensors does not match the {len(planned)} announced "
            f"(name, shape) pairs{': ' + diff if diff else ''}; the engine's weights are now a mix: push again"
        )


class BucketLoad:
    """One in-place reload of an engine's workers (``rpc``: its ``collective_rpc``) fed one bucket per
    RPC, so only one bucket is ever serialised at a time: :meth:`begin`, :meth:`load` per bucket (each
    checked against ``announced``, every (name, shape) the buckets will carry, in order; check it first
    with :func:`check_announced`), then :meth:`end`, or :meth:`abort` after a failure.
    ``RolloutEngine.push_weight_buckets`` runs it over an iterable; a Ray engine is driven one call at a
    time, as the buckets are made.

    A failure after the first bucket leaves the workers' weights a mix of old and new (the reload is
    still finished, so the engine stays usable): push again."""

    def __init__(
        self, rpc: Callable[..., list[Any]], announced: Sequence[tuple[str, tuple[int, ...]]]
    ) -> None:
        self.rpc, self.announced = rpc, list(announced)
        self.offset = 0  # tensors loaded so far
        self.count = 0  # buckets loaded so far
        self._open = False

    def begin(self) -> None:
        self.rpc("reelrl_begin_buckets")
        self._open = True

    def load(self, bucket: Mapping[str, torch.Tensor]) -> None:
        if not self._open:
            raise RuntimeError("a weight bucket arrived outside a bucketed push (begin it first)")
        check_bucket(bucket, self.announced[self.offset : self.offset + len(bucket)])
        data = safetensors_bytes(bucket)
        self._loaded(self.rpc("reelrl_load_bucket", args=(data,)), len(bucket))

    def receive(self, index: int, slots: Sequence[tuple[str, tuple[int, ...], str]]) -> None:
        """The next bucket arrives over the weight group (bucket ``index`` of the push, ``slots`` its
        tensors): each worker receives and loads it (``reelrl_receive_bucket``)."""
        if not self._open:
            raise RuntimeError("a weight bucket arrived outside a bucketed push (begin it first)")
        planned = self.announced[self.offset : self.offset + len(slots)]
        if [(n, tuple(s)) for n, s, _ in slots] != [(n, tuple(s)) for n, s in planned]:
            raise ValueError(
                f"weight bucket {index} ({len(slots)} tensors) is not the next announced tensors; the "
                "engine's weights are now a mix: push again"
            )
        self._loaded(raise_statuses(self.rpc("reelrl_receive_bucket", args=(index, list(slots)))), len(slots))

    def _loaded(self, per_worker: Sequence[int], expected: int) -> None:
        """Every worker must have loaded the bucket's ``expected`` tensors; the push then moves past it."""
        for rank, loaded in enumerate(per_worker):
            if loaded != expected:
                raise RuntimeError(f"worker {rank} loaded {loaded} of the {expected} tensors of a bucket")
        self.offset += expected
        self.count += 1

    def abort(self) -> None:
        """Finish the reload after a failure (the engine stays usable; its weights are undefined)."""
        if self._open:
            self._open = False
            self.rpc("reelrl_end_buckets")

    def end(self) -> int:
        """Finish the reload; raises if a tensor announced, or one the engine has, was not loaded.
        Returns how many buckets were loaded."""
        if not self._open:
            raise RuntimeError("no bucketed push is open")
        self._open = False
        missing = self.rpc("reelrl_end_buckets")
        if self.offset != len(self.announced):
            raise RuntimeError(
                f"the buckets carried {self.offset} of the {len(self.announced)} announced tensors; push again"
            )
        for rank, names_missing in enumerate(missing):
            if names_missing:
                raise RuntimeError(
                    f"worker {rank}: {len(names_missing)} engine parameters were not loaded by any bucket "
                    f"(e.g. {names_missing[:3]}); push again"
                )
        return self.count


def outcome(call: Callable[[], Any], member: Any = None) -> dict[str, Any]:
    """A worker's answer to a weight-group RPC as a value, never raised: vLLM's multi-process executor
    stops reading replies at the first worker that raised, and the next RPC would read the others'
    (tensor parallel > 1). A failure other than the sender's own (which leaves the group in step)
    makes this worker leave ``member``'s group, so the others fail at once instead of at the timeout."""
    from services.rollout.weight_group import SenderFailed, WeightGroupError

    try:
        return {"ok": call()}
    except Exception as exc:
        if member is not None and not isinstance(exc, SenderFailed):
            member.close()
        kind = (
            "sender"
            if isinstance(exc, SenderFailed)
            else "group"
            if isinstance(exc, WeightGroupError)
            else "own"
        )
        return {"error": kind, "message": f"{type(exc).__name__}: {exc}"}


def raise_statuses(results: Sequence[dict[str, Any]]) -> list[Any]:
    """The workers' values from :func:`outcome` answers, or the failure: a worker's own error first
    (a ``RuntimeError``: this engine failed), else the group's (``WeightGroupError``, or
    ``SenderFailed`` when rank 0 could not make the bucket)."""
    from services.rollout.weight_group import SenderFailed, WeightGroupError

    errors = [(rank, r) for rank, r in enumerate(results) if "error" in r]
    for kind, error in (("own", RuntimeError), ("group", WeightGroupError), ("sender", SenderFailed)):
        for rank, result in errors:
            if result["error"] == kind:
                raise error(f"engine worker {rank}: {result['message']}")
    return [r["ok"] for r in results]


def refresh_tied_heads(model: torch.nn.Module) -> list[str]:
    """Process again each LM head tied to the input embeddings (one parameter in two vLLM embedding
    layers) after an in-place reload; returns their module names.

    A push leaves a tied head out (the trainer's stream does; a checkpoint's files hold none): loading
    the embeddings writes the shared storage, so the head's weight is new, but the reload never
    processes the head's own layer, and what that processing derives from the weight stays old: on
    vLLM's CPU backend the head multiplies by a packed copy made then, so its logits would come from
    the previous weights. Processing an unquantised embedding again only redoes that copy (nothing on
    a GPU, which multiplies by the weight itself)."""
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    owners: dict[int, str] = {}
    heads = []
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None) if isinstance(module, VocabParallelEmbedding) else None
        if weight is None:
            continue
        if owners.setdefault(id(weight), name) != name:
            module.quant_method.process_weights_after_loading(module)
            heads.append(name)
    return heads


class WeightSyncExtension:
    """Methods added to vLLM's worker (``worker_extension_cls``), called through ``collective_rpc``."""

    def reelrl_reload_from_folder(self, folder: str) -> int:
        """Load the safetensors files in ``folder`` in place; returns how many tensors they held. vLLM's
        own ``reload_weights(weights_path=folder)`` would also point the model config at the folder for
        good: an engine core in the same process (``EngineConfig.in_process``) then looked for its
        processor there and failed on the next request."""
        from safetensors import safe_open

        files = safetensors_files(folder)
        if not files:
            raise FileNotFoundError(f"no safetensors file in {folder}")
        count = 0

        def tensors() -> Iterator[tuple[str, torch.Tensor]]:
            nonlocal count
            for file in files:
                with safe_open(str(file), framework="pt") as handle:
                    for name in handle.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                        count += 1
                        yield name, handle.get_tensor(name)

        self.reload_weights(weights_iterator=tensors())  # type: ignore[attr-defined]
        self._reelrl_refresh_tied_heads()
        return count

    def reelrl_reload_from_bytes(self, data: bytes) -> int:
        """Load safetensors ``data`` in place; returns how many tensors it held."""
        from safetensors.torch import load

        weights = load(data)
        self.reload_weights(weights_iterator=iter(weights.items()))  # type: ignore[attr-defined]
        self._reelrl_refresh_tied_heads()
        return len(weights)

    def _reelrl_refresh_tied_heads(self) -> None:
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            refresh_tied_heads(self.model_runner.get_model())  # type: ignore[attr-defined]

    # -- bucketed loads: begin, one load per bucket, end (one in-place reload spread over several RPCs) --

    def reelrl_begin_buckets(self) -> int:
        """Start an in-place reload that the next :meth:`reelrl_load_bucket` calls feed. vLLM puts each
        layer back on the meta device and processes it (the CPU backend's repacking included) once all
        of its tensors have arrived, so a layer split across two buckets is still right. Returns how
        many parameters the engine expects to load."""
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        # named before the reload starts, as vLLM's own reload_weights names them: a tied LM head is
        # then the embeddings' parameter and named once. The reload gives every layer a meta tensor of
        # its own, so named afterwards the head would count as missing from a push that leaves it out,
        # although loading the embeddings fills its storage (the trainer's stream does leave it out).
        self._reelrl_expected = {name for name, _ in model.named_parameters()}
        initialize_layerwise_reload(model)
        self._reelrl_loaded: set[str] = set()
        return len(self._reelrl_expected)

    def reelrl_load_bucket(self, data: bytes) -> int:
        """Load one bucket (safetensors ``data``) into the reload :meth:`reelrl_begin_buckets` started;
        returns how many tensors it held."""
        from safetensors.torch import load
        from vllm.config import set_current_vllm_config

        weights = load(data)
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            loaded = model.load_weights(iter(weights.items()))
        self._reelrl_loaded |= set(loaded or ())
        return len(weights)

    def reelrl_load_tensors(self, weights: Mapping[str, torch.Tensor]) -> int:
        """:meth:`reelrl_load_bucket` for an engine in the caller's own process (colocated: vLLM's
        ``external_launcher`` executor calls the worker directly, so tensors arrive as tensors, with
        no serialised copy)."""
        from vllm.config import set_current_vllm_config

        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            loaded = model.load_weights(iter(weights.items()))
        self._reelrl_loaded |= set(loaded or ())
        return len(weights)

    # -- the weight-broadcast group (services.rollout.weight_group): this worker is one member ------------

    def reelrl_join_weight_group(self, address: str, first_rank: int, world: int, timeout_s: float,
                                 backend: str) -> dict[str, Any]:  # fmt: skip
        """Join the group at ``address`` as rank ``first_rank`` + this worker's rank in its engine (a
        group joined before is left first); blocks until every member has joined. Returns the rank."""
        from services.rollout import weight_group

        def join() -> int:
            device = self._reelrl_device()
            if weight_group.backend_for(device) != backend:
                raise RuntimeError(f"a {backend} weight group cannot reach this worker's {device}")
            self.reelrl_leave_weight_group()
            rank = first_rank + int(getattr(self, "rank", 0))
            self._reelrl_group = weight_group.join(address, rank, world, timeout_s, backend)
            return rank

        return outcome(join)

    def reelrl_receive_bucket(
        self, index: int, slots: list[tuple[str, tuple[int, ...], str]]
    ) -> dict[str, Any]:
        """Receive bucket ``index`` over the group and load it into the open reload; answers (see
        :func:`outcome`) how many tensors it held."""
        from services.rollout import weight_group

        member = getattr(self, "_reelrl_group", None)

        def receive() -> int:
            if member is None:  # this engine's own state, not the group's
                raise RuntimeError("this worker has joined no weight group")
            planned = [(name, tuple(shape), dtype) for name, shape, dtype in slots]
            return self.reelrl_load_tensors(
                weight_group.receive(member, index, planned, self._reelrl_device())
            )

        return outcome(receive, member)

    def reelrl_leave_weight_group(self) -> None:
        member, self._reelrl_group = getattr(self, "_reelrl_group", None), None
        if member is not None:
            member.close()

    def _reelrl_device(self) -> Any:
        device = getattr(self, "device", None)
        return device if device is not None else torch.device("cpu")

    def reelrl_end_buckets(self) -> list[str]:
        """Finish the reload (layers still waiting for tensors are processed with what they have) and drop
        the caches derived from the old weights; returns the engine parameters no bucket loaded (vLLM
        only logs them: the caller refuses)."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        runner = self.model_runner  # type: ignore[attr-defined]
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            finalize_layerwise_reload(runner.get_model(), self.vllm_config.model_config)  # type: ignore[attr-defined]
            refresh_tied_heads(runner.get_model())
        for reset in ("reset_lora_state", "reset_encoder_cache", "reset_mm_cache"):
            if hasattr(runner, reset):
                getattr(runner, reset)()
        return sorted(self._reelrl_expected - self._reelrl_loaded)

    def reelrl_runtime(self) -> dict[str, Any]:
        """How torchvision fares in this worker process (tests check the install recipe took effect)."""
        import os

        import torchvision.transforms.v2.functional  # noqa: F401  (what transformers' video processors use)

        import services.common.compat.torchvision_ops as compat

        return {
            "pid": os.getpid(),
            "torchvision_ok": True,
            "extension_loads": compat.extension_loads(),
            "compat_applied": compat.apply(),
        }
