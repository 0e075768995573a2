"""What the batch and the streaming engine share: the checkpoint, the frame source, the reward client
of the mix gate, and starting vLLM inside the private environment (services.rollout.environment)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from services.common.families import Family
from services.rollout import engine_processes
from services.rollout.checkpoint import Checkpoint
from services.rollout.config import RolloutConfig, call_config
from services.rollout.environment import MULTIPROCESSING, engine_environment, remove_private_folder
from services.rollout.media import FrameSource
from services.rollout.vllm_bridge import check_platform, sleep_mode_available

log = logging.getLogger(__name__)
T = TypeVar("T")
#: the engine whose core runs in this process, if any (``EngineConfig.in_process``): vLLM keeps one
#: engine's state in module globals, and a second in-process engine started beside it corrupted this
#: process's heap ("corrupted size vs. prev_size"). One after another is fine.
_in_process: EngineBase | None = None
#: how long stopping an in-process engine waits for a call still running in it
IN_PROCESS_STOP_WAIT_S = 60.0
#: vLLM's sleep-mode tags: what ``wake_up`` may bring back one at a time (a colocated engine wakes its
#: weights, takes the push, then its KV cache: services/rollout/colocated.py)
WEIGHTS, KV_CACHE = "weights", "kv_cache"
SLEEP_TAGS = (WEIGHTS, KV_CACHE)


def _check_in_process_start() -> None:
    """Refuse an in-process engine where it cannot run safely: beside another one, or in a process
    that already has a ``torch.distributed`` group (vLLM's engine would adopt it as its own world and
    destroy it at shutdown)."""
    import torch.distributed as dist

    if _in_process is not None:
        raise RuntimeError(
            f"an engine for {_in_process.checkpoint.path} already runs in this process, and vLLM holds one "
            "in-process engine at a time: shut it down first, or set engine.in_process: false"
        )
    if dist.is_available() and dist.is_initialized():
        raise RuntimeError(
            "this process already has a torch.distributed process group, which an in-process engine would "
            "take as its own and destroy at shutdown: set engine.in_process: false"
        )


def _forget_failed_start() -> None:
    """After an in-process start that raised: vLLM may have set up its one-rank torch.distributed
    group and model-parallel state before failing (e.g. sizing the KV cache), which would refuse every
    later in-process engine in this process (a long-lived train worker)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        try:
            cleanup_dist_env_and_memory()
        except Exception:  # the start's own error is the one to report
            log.exception("cleaning up after a failed in-process engine start")


class EngineBase:
    """``source`` defaults to the frame store of the ``REELRL_*`` settings, ``reward_client`` (used only
    by the mix gate) to an in-process one. Subclasses start their vLLM engine in :meth:`_launch`."""

    #: whether vLLM can run this kind of engine's core in the calling process (``engine.in_process``)
    can_run_in_process = True

    def __init__(
        self,
        model: str | Path,
        config: RolloutConfig | None = None,
        *,
        source: FrameSource | None = None,
        reward_client: Any = None,
        cpu_cores: Sequence[int] | None = None,
    ) -> None:
        self.config = config or RolloutConfig()
        #: on vLLM's CPU backend, the cores its OpenMP threads are bound to (None: vLLM's own choice)
        self.cpu_cores = list(cpu_cores) if cpu_cores else None
        check_platform(self.config)
        #: the weights' version: 0 for the checkpoint's, +1 per push (a push that failed after reaching
        #: the workers counts too: their weights are undefined then). Every response records the
        #: version(s) that produced its tokens.
        self.weight_version = 0
        self._sleep_level: int | None = None  # level of the last sleep (read while it lasts)
        self._asleep: tuple[str, ...] = ()  # the sleep tags still released (a wake-up may be partial)
        self._said_no_sleep = False
        self._weights_discarded = False  # by a level-2 sleep, until the next push
        self.checkpoint = Checkpoint.load(model)
        if source is None:
            from services.common.frames import FrameStore

            source = FrameStore.from_settings()
        self.source = source
        self._reward_client = reward_client
        self._open = False
        self.in_process = False
        self._calls = threading.RLock()
        self._stopping = False  # a shutdown holds _calls from its wait to vLLM's teardown
        self._launch()

    def _launch(self) -> None:
        raise NotImplementedError

    def _start(self, construct: Callable[[], T]) -> T:
        """Run vLLM's constructor in a fresh private environment; records start-up time and folder."""
        global _in_process
        started = time.perf_counter()
        #: whether vLLM's engine core and worker run in this process: as set, or when not set, as the
        #: operator exported it (an explicit false runs in processes of their own whatever is exported)
        asked = self.config.engine.in_process
        if asked is None:
            asked = os.environ.get(MULTIPROCESSING) == "0"
        self.in_process = self.can_run_in_process and asked
        with engine_environment(self.cpu_cores, in_process=self.in_process) as folder:  # one at a time
            constructing = False
            try:
                if self.in_process:
                    _check_in_process_start()
                constructing = True
                engine = construct()
            except BaseException:
                if self.in_process and constructing:  # a group there before the start is not vLLM's
                    _forget_failed_start()
                remove_private_folder(folder)
                raise
            if self.in_process:
                _in_process = self
        #: private folder with vLLM's socket and rendezvous files; removed at shutdown
        self.temp_folder = folder
        #: the engine's processes and shared memory, seen gone (or removed) at shutdown
        self.footprint = engine_processes.footprint(engine)
        self.startup_s = time.perf_counter() - started
        self._open = True
        log.info("%s for %s started in %.1f s", type(self).__name__, self.checkpoint.path, self.startup_s)
        return engine

    @contextmanager
    def _calling(self) -> Iterator[None]:
        """Held while a call runs inside vLLM: an in-process engine is stopped only between calls, and
        a call that comes after the stop (a push thread a fleet gave up on) is refused by name."""
        if not self._open:  # before the lock too: a stop that gave up leaves a hung call holding it
            raise RuntimeError(f"the engine for {self.checkpoint.path} is stopped")
        with self._calls:
            if not self._open:
                raise RuntimeError(f"the engine for {self.checkpoint.path} is stopped")
            yield

    def _begin_shutdown(self) -> bool:
        """True exactly once, for the caller that should stop vLLM (shutdown is idempotent). An
        in-process engine waits for a call still running in it (a fleet gives up on one that hangs and
        stops it from another thread): torn down under a running step, the process's state would be
        undefined. If the call does not end in time, the engine is left to end with this process
        (False: no in-process engine can start beside it meanwhile)."""
        if not self._open:  # stopped already, or given up on (no second wait)
            return False
        if not self.in_process:
            was_open, self._open = self._open, False
            return was_open
        # held until _end_shutdown: no call starts between the wait and vLLM's teardown
        if self._calls.acquire(timeout=IN_PROCESS_STOP_WAIT_S):
            was_open, self._open = self._open, False
            if not was_open:
                self._calls.release()
            self._stopping = was_open
            return was_open
        self._open = False
        log.warning(
            "the in-process engine for %s is still inside a call after %.0f s: it is left to end with this "
            "process", self.checkpoint.path, IN_PROCESS_STOP_WAIT_S,
        )  # fmt: skip
        return False

    def _end_shutdown(self) -> None:
        """After vLLM's shutdown, even one that raised: the engine's processes, segments and folder."""
        global _in_process
        if _in_process is self:
            _in_process = None
        if self._stopping:
            self._stopping = False
            self._calls.release()
        engine_processes.release(self.footprint)
        remove_private_folder(self.temp_folder)

    def _begin_sleep(self, level: int) -> bool:
        """Whether vLLM should sleep at ``level``; False where sleeping cannot release memory (vLLM's CPU
        backend), which is logged: the call is then a no-op."""
        if level not in (1, 2):
            raise ValueError(
                f"sleep level must be 1 (offload weights, drop KV cache) or 2 (drop both), got {level}"
            )
        if self._asleep:
            raise RuntimeError(
                f"the engine is already asleep (level {self._sleep_level}); call wake_up() first"
            )
        if not self.config.engine.enable_sleep_mode:
            if sleep_mode_available():
                raise RuntimeError(
                    "sleep() needs engine.enable_sleep_mode: true (vLLM can release only memory it "
                    "allocated for sleeping)"
                )
            # once per engine: a colocated CPU engine is asked every step
            (log.debug if self._said_no_sleep else log.warning)(
                "sleep(level=%d) is a no-op: vLLM's CPU backend cannot release the KV cache or weights", level
            )
            self._said_no_sleep = True
            return False
        return True

    def _end_sleep(self, level: int) -> None:
        self._sleep_level, self._asleep = level, SLEEP_TAGS
        self._weights_discarded = self._weights_discarded or level == 2

    def _to_wake(self, tags: Sequence[str] | None) -> list[str]:
        """Of ``tags`` (None: all), those still asleep, in vLLM's order; unknown tags are refused."""
        unknown = set(tags or ()) - set(SLEEP_TAGS)
        if unknown:
            raise ValueError(f"unknown sleep tag(s) {sorted(unknown)}; tags: {list(SLEEP_TAGS)}")
        return [t for t in self._asleep if tags is None or t in tags]

    def _woke(self, tags: Sequence[str]) -> None:
        self._asleep = tuple(t for t in self._asleep if t not in tags)

    @property
    def sleeping(self) -> bool:
        return bool(self._asleep)

    def _check_ready(self, action: str) -> None:
        """Refuse ``action`` while asleep (a push needs only the weights awake), and generation after a
        level-2 sleep until weights are pushed."""
        asleep = self._asleep if action != "push weights" else tuple(t for t in self._asleep if t == WEIGHTS)
        if asleep:
            raise RuntimeError(
                f"cannot {action}: the engine is asleep (level {self._sleep_level}); call wake_up()"
            )
        if self._weights_discarded and action == "generate":
            raise RuntimeError("cannot generate: sleep(level=2) discarded the weights; push weights first")

    @property
    def family(self) -> Family:
        return self.checkpoint.family

    @property
    def reward_client(self) -> Any:
        if self._reward_client is None:
            from services.reward.client import make_reward_client

            self._reward_client = make_reward_client()
        return self._reward_client

    def _call_config(self, n: int | None, mix_policy: bool | None = None) -> RolloutConfig:
        """The validated config of one rollout call (see :func:`~services.rollout.config.call_config`)."""
        return call_config(self.config, n, mix_policy)

    def _gate_client(self, config: RolloutConfig) -> Any:
        """The reward client when the mix gate needs scores, else None (nothing to score)."""
        return self.reward_client if config.mix_accuracy_threshold is not None else None
