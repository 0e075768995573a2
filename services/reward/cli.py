"""``reelrl serve reward``: uvicorn running ``services.reward.app:create_app`` with N worker processes."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Sequence

import uvicorn


def serve_reward(
    host: str = "127.0.0.1", port: int = 8100, workers: int = 2, functions: Sequence[str] = ()
) -> None:
    """Serve until interrupted. Several workers share one Prometheus directory so /metrics sums them.
    ``functions`` (``NAME=file.py:function``) reach the workers as REELRL_REWARD_FUNCTIONS, checked here
    first so a bad entry stops the command, not each worker."""
    if functions:
        from services.reward.app import load_served_functions
        from services.reward.settings import RewardServiceSettings

        joined = ",".join([*filter(None, [os.environ.get("REELRL_REWARD_FUNCTIONS", "")]), *functions])
        for runner in load_served_functions(RewardServiceSettings(functions=joined)).values():
            runner.close()
        os.environ["REELRL_REWARD_FUNCTIONS"] = joined  # inherited by the spawned workers
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        folder = tempfile.mkdtemp(prefix="reelrl-reward-metrics-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder  # inherited by the spawned workers
    uvicorn.run(
        "services.reward.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="info",
        timeout_graceful_shutdown=10,
    )
