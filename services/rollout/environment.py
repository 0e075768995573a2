"""The process environment vLLM reads, set in this one place while an engine is constructed.

Defaults (``os.environ.setdefault``: a value the operator exported wins):
- ``HF_HUB_OFFLINE=1``: checkpoints are local folders; nothing may reach for a hub at run time.
- ``VLLM_CPU_OMP_THREADS_BIND=auto``: pin the CPU worker's OpenMP threads (``nobind`` was ~14x slower
  here). ``auto`` picks the same cores for every engine of one process, so a fleet of engines in one
  process gives each its own share of the cores instead (``cpu_cores`` below); an exported value other
  than ``auto`` wins.
- ``VLLM_ENABLE_V1_MULTIPROCESSING=1``: the engine core (and its worker) in processes of their own,
  except for an engine constructed ``in_process`` (``EngineConfig.in_process``), which gets ``0``: its
  core and worker run in this process (docs/rollout.md, "In-process engines").

Per engine, while it is constructed (its processes are spawned then and inherit the values):
- ``TMPDIR`` and ``VLLM_RPC_BASE_PATH`` point at a private folder. vLLM's processes leave ZMQ socket
  files and gloo rendezvous files (``vllm_dist_*``) in the temp directory and never remove them; the
  engine removes its folder, and with it those files, on shutdown. An exported ``VLLM_RPC_BASE_PATH``
  is kept. This process's own temp directory is pinned first, so nothing else here moves.
- The private folder holds a link named as torch's compile cache (``torchinductor_<user>``) to the
  cache this process would use (an exported ``TORCHINDUCTOR_CACHE_DIR``, else the one in its own temp
  directory). torch puts its precompiled headers in that default folder under the temp directory
  whatever is exported: without the link, every engine start compiled them again into the private
  folder, then removed them with it (~10 CPU-seconds of g++ per engine start on a 2-core machine).
- ``cpu_cores``: where ``VLLM_CPU_OMP_THREADS_BIND`` is ``auto``, the engine's OpenMP threads are bound
  to these cores (:func:`core_share` splits a process's cores between its engines).
- ``REELRL_ENGINE_OWNER`` marks the engine's processes as this process's: they end when it dies, even
  by SIGKILL, and a worker starting later ends any whose owner is gone (:mod:`services.common.orphans`).

Deliberately not set: ``VLLM_CPU_KVCACHE_SPACE``. The KV cache is sized by the engine argument
``kv_cache_memory_bytes`` (``EngineConfig.kv_cache_gib``: fractions allowed, CPU and GPU alike); if
exported anyway, vLLM's CPU platform lets it override that argument.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from services.common.orphans import MARKER, owner_marker

log = logging.getLogger(__name__)

BIND = "VLLM_CPU_OMP_THREADS_BIND"
MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"
DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    BIND: "auto",
    MULTIPROCESSING: "1",
}
PRIVATE = ("TMPDIR", "VLLM_RPC_BASE_PATH", MARKER, BIND, MULTIPROCESSING)


def core_share(cores: Sequence[int], index: int, count: int) -> list[int]:
    """The ``index``-th of ``count`` equal, disjoint slices of ``cores`` (all of them when there are
    fewer cores than engines: sharing is then unavoidable)."""
    if count <= 1 or len(cores) < count:
        return list(cores)
    share = len(cores) // count
    return list(cores[index * share : (index + 1) * share])


def pin_here(slot: tuple[int, int]) -> list[int] | None:
    """Keep this process (each of its threads) and every process it starts from now on on share
    ``slot`` = (index, count) of the calling thread's cores (:func:`core_share`); returns those cores,
    or None when there are fewer cores than shares (nothing is pinned then: sharing is unavoidable).

    For a process that is one engine of a fleet on vLLM's CPU backend (a disaggregated engine's Ray
    actor): its own threads prepare every request and read every output, its engine core schedules,
    its worker generates. Pinned together, an engine is one share of the machine, as one GPU is on a
    cluster; left to float, each engine's frontend and scheduler took whichever core was idle, and two
    engines on 2 cores were no faster than one (docs/benchmarks.md, "Rollout fleet")."""
    mine = sorted(os.sched_getaffinity(0))
    index, count = slot
    if not 0 <= index < count:
        raise ValueError(f"core slot {index} of {count} does not exist")
    if len(mine) < count:
        return None
    cores = core_share(mine, index, count)
    # On Linux the affinity is per thread (threads and processes inherit their creator's): the calling
    # thread last, so a failure on another thread leaves it as it was
    for task in Path("/proc/self/task").iterdir():
        if int(task.name) != threading.get_native_id():
            with contextlib.suppress(OSError):  # a thread that has ended meanwhile
                os.sched_setaffinity(int(task.name), cores)
    os.sched_setaffinity(0, cores)
    return cores


#: one engine is constructed at a time: the values below are process-wide, and a fleet restarts a
#: failed engine on a thread of its own (two at once would each save the other's values and restore
#: them for good)
_CONSTRUCTING = threading.Lock()


@contextmanager
def engine_environment(cpu_cores: Sequence[int] | None = None, *, in_process: bool = False) -> Iterator[Path]:
    """Apply the defaults and a fresh private folder for the engine being constructed inside, its
    OpenMP threads bound to ``cpu_cores`` where the binding is ``auto``. ``in_process``: its engine
    core and worker run in this process (``EngineConfig.in_process``).

    Yields the folder; the caller removes it (:func:`remove_private_folder`) after shutting down.
    """
    with _CONSTRUCTING, _environment(cpu_cores) as folder:
        if not in_process:
            os.environ[MULTIPROCESSING] = "1"  # whatever the operator exported (restored after)
            yield folder
            return
        os.environ[MULTIPROCESSING] = "0"
        with _process_kept_as_it_was(folder):
            yield folder


@contextmanager
def _process_kept_as_it_was(folder: Path) -> Iterator[None]:
    """What vLLM's engine start changes in the process it runs in, which in process is this one: its
    CPU worker makes ``torch.set_num_threads`` a no-op (it binds its own threads), it seeds the global
    random generators with the rollout seed, and its single-process executor puts its rendezvous file
    in the temp directory (here: the engine's private folder, removed at shutdown)."""
    import random

    import numpy as np
    import torch

    set_num_threads = torch.set_num_threads
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    # vLLM seeds every CUDA device too (manual_seed_all); read only where CUDA is already up
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    cached = tempfile.tempdir
    tempfile.tempdir = str(folder)
    try:
        yield
    finally:
        tempfile.tempdir = cached
        torch.set_num_threads = set_num_threads
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


@contextmanager
def restored_environ(names: Iterable[str]) -> Iterator[None]:
    """Inside, change any of ``names`` in ``os.environ`` freely; on leaving, each is as it was (set to its
    old value, or unset if it was unset), whatever happened inside."""
    saved = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def _environment(cpu_cores: Sequence[int] | None) -> Iterator[Path]:
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, value)
    tempfile.gettempdir()  # caches this process's temp dir before TMPDIR changes below
    compile_cache = compile_cache_dir()
    _uncache_vllm_envs()
    folder = Path(tempfile.mkdtemp(prefix="reelrl-vllm-"))
    try:
        compile_cache.mkdir(parents=True, exist_ok=True)
        (folder / compile_cache_dir_name()).symlink_to(compile_cache, target_is_directory=True)
    except OSError as exc:  # only a speed-up: without it the engine compiles its headers again
        log.warning(
            "torch's compile cache %s cannot be linked into the engine's folder: %s", compile_cache, exc
        )
    with restored_environ(PRIVATE):
        if cpu_cores and os.environ[BIND] == "auto":
            os.environ[BIND] = ",".join(map(str, cpu_cores))
        os.environ["TMPDIR"] = str(folder)
        os.environ.setdefault("VLLM_RPC_BASE_PATH", str(folder))
        os.environ[MARKER] = owner_marker()
        yield folder


def compile_cache_dir_name() -> str:
    """The name of torch's default compile cache folder in a temp directory (``torchinductor_<user>``)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return Path(default_cache_dir()).name


def compile_cache_dir() -> Path:
    """The compile cache torch would use in this process: an exported one, else its default."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    # absolute, as torch makes it: a relative one would be read from the engine's folder
    return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir()).absolute()


def _uncache_vllm_envs() -> None:
    """vLLM freezes its environment reads once an in-process engine core has started; a later engine
    in this process must see its own folder."""
    import vllm.envs

    if vllm.envs._is_envs_cache_enabled():
        vllm.envs.disable_envs_cache()


def remove_private_folder(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
