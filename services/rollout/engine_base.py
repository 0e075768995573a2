"""What the batch and the streaming engine share: the checkpoint, the frame source, the reward client
of the mix gate, and starting vLLM inside the private environment (services.rollout.environment)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from services.common.families import Family
from services.rollout.checkpoint import Checkpoint
from services.rollout.config import RolloutConfig, call_config
from services.rollout.environment import engine_environment, remove_private_folder
from services.rollout.media import FrameSource

log = logging.getLogger(__name__)
T = TypeVar("T")


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
    ) -> None:
        self.config = config or RolloutConfig()
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
        started = time.perf_counter()
        with engine_environment() as folder:
            try:
                engine = construct()
            except BaseException:
                remove_private_folder(folder)
                raise
        #: private folder with vLLM's socket and rendezvous files; removed at shutdown
        self.temp_folder = folder
        self.startup_s = time.perf_counter() - started
        self._open = True
        log.info("%s for %s started in %.1f s", type(self).__name__, self.checkpoint.path, self.startup_s)
        return engine

    def _begin_shutdown(self) -> bool:
        """True exactly once, for the caller that should stop vLLM (shutdown is idempotent)."""
        was_open, self._open = self._open, False
        return was_open

    def _end_shutdown(self) -> None:
        remove_private_folder(self.temp_folder)

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
