"""What the batch and the streaming engine share: the checkpoint, the frame source, the reward client
of the mix gate, and starting vLLM inside the private environment (services.rollout.environment)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from services.common.families import Family
from services.rollout import engine_processes
from services.rollout.checkpoint import Checkpoint
from services.rollout.config import RolloutConfig, call_config
from services.rollout.environment import engine_environment, remove_private_folder
from services.rollout.media import FrameSource
from services.rollout.vllm_bridge import check_platform, sleep_mode_available

log = logging.getLogger(__name__)
T = TypeVar("T")
#: the engine whose core runs in this process, if any (``EngineConfig.in_process``): vLLM keeps one
#: engine's state in module globals, and a second in-process engine started beside it corrupted this
#: process's heap ("corrupted size vs. prev_size"). One after another is fine.
_in_process: EngineBase | None = None


class EngineBase:
    """``source`` defaults to the frame store of the ``REELRL_*`` settings, ``reward_client`` (used only
    by the mix gate) to an in-process one. Subclasses start their vLLM engine in :meth:`_launch`."""

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
        self._sleep_level: int | None = None  # level of the current sleep, None when awake
        self._weights_discarded = False  # by a level-2 sleep, until the next push
        self.checkpoint = Checkpoint.load(model)
        if source is None:
            from services.common.frames import FrameStore

            source = FrameStore.from_settings()
        self.source = source
        self._reward_client = reward_client
        self._open = False
        self._launch()

    def _launch(self) -> None:
        raise NotImplementedError

    def _start(self, construct: Callable[[], T]) -> T:
        """Run vLLM's constructor in a fresh private environment; records start-up time and folder."""
        global _in_process
        started = time.perf_counter()
        in_process = bool(self.config.engine.in_process)
        with engine_environment(self.cpu_cores, in_process=in_process) as folder:  # one start at a time
            try:
                if in_process and _in_process is not None:
                    raise RuntimeError(
                        f"an engine for {_in_process.checkpoint.path} already runs in this process, and "
                        "vLLM holds one in-process engine at a time: shut it down first, or set "
                        "engine.in_process: false"
                    )
                engine = construct()
            except BaseException:
                remove_private_folder(folder)
                raise
            if in_process:
                _in_process = self
        #: private folder with vLLM's socket and rendezvous files; removed at shutdown
        self.temp_folder = folder
        #: the engine's processes and shared memory, seen gone (or removed) at shutdown
        self.footprint = engine_processes.footprint(engine)
        self.startup_s = time.perf_counter() - started
        self._open = True
        log.info("%s for %s started in %.1f s", type(self).__name__, self.checkpoint.path, self.startup_s)
        return engine

    def _begin_shutdown(self) -> bool:
        """True exactly once, for the caller that should stop vLLM (shutdown is idempotent)."""
        was_open, self._open = self._open, False
        return was_open

    def _end_shutdown(self) -> None:
        global _in_process
        if _in_process is self:
            _in_process = None
        engine_processes.release(self.footprint)
        remove_private_folder(self.temp_folder)

    def _begin_sleep(self, level: int) -> bool:
        """Whether vLLM should sleep at ``level``; False where sleeping cannot release memory (vLLM's CPU
        backend), which is logged: the call is then a no-op."""
        if level not in (1, 2):
            raise ValueError(
                f"sleep level must be 1 (offload weights, drop KV cache) or 2 (drop both), got {level}"
            )
        if self._sleep_level is not None:
            raise RuntimeError(
                f"the engine is already asleep (level {self._sleep_level}); call wake_up() first"
            )
        if not self.config.engine.enable_sleep_mode:
            if sleep_mode_available():
                raise RuntimeError(
                    "sleep() needs engine.enable_sleep_mode: true (vLLM can release only memory it "
                    "allocated for sleeping)"
                )
            log.warning(
                "sleep(level=%d) is a no-op: vLLM's CPU backend cannot release the KV cache or weights", level
            )
            return False
        return True

    def _end_sleep(self, level: int) -> None:
        self._sleep_level = level
        self._weights_discarded = self._weights_discarded or level == 2

    @property
    def sleeping(self) -> bool:
        return self._sleep_level is not None

    def _check_ready(self, action: str) -> None:
        """Refuse ``action`` while asleep, and generation after a level-2 sleep until weights are pushed."""
        if self._sleep_level is not None:
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
