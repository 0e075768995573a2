"""A real vLLM engine dies with the process that built it when that process is killed with SIGKILL
(services.common.orphans). Only the processes this test starts are judged."""

import contextlib
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

OWNER = textwrap.dedent(
    """
    import sys, time
    from services.rollout.config import EngineConfig, RolloutConfig
    from services.rollout.engine import RolloutEngine

    config = RolloutConfig(
        n=1, max_tokens=4, engine=EngineConfig(dtype="float32", max_model_len=2048, kv_cache_gib=0.25)
    )
    engine = RolloutEngine(sys.argv[1], config)
    print("ready", flush=True)
    time.sleep(600)
    """
)


def _running(pids):
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_a_real_engine_dies_with_its_killed_parent(tiny_models):
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tiny_models["qwen2_5_vl"])], stdout=subprocess.PIPE, text=True
    )
    started: list[int] = []
    try:
        for line in owner.stdout:  # vLLM logs to stdout too
            if line.strip() == "ready":
                break
        else:
            pytest.fail(f"the engine did not start (exit {owner.wait()})")
        processes = psutil.Process(owner.pid).children(recursive=True)
        started = [p.pid for p in processes]
        titles = [" ".join([p.name(), *p.cmdline()]) for p in processes]
        assert any("EngineCore" in t for t in titles), titles  # vLLM's engine core is among them
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + 30
        while _running(started) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _running(started), [psutil.Process(p).cmdline() for p in _running(started)]
    finally:
        for pid in [owner.pid, *_running(started)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).kill()
        owner.wait()
