"""Colocated placement on CPU: 2 gloo ranks, each hosting a vLLM engine shard in its own process
(vLLM's external_launcher over the ranks' process group). After a bucketed load from the FSDP2
parameters, each engine's logprobs are the new weights' (and no longer the old ones')."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.actor_steps import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TOLERANCE = 1e-4
TIMEOUT_S = 600


def test_two_ranks_each_host_an_engine_and_load_their_own_buckets(tmp_path: Path) -> None:
    from services.common.tiny_models import build_tiny_model

    model = build_tiny_model("qwen2_5_vl", tmp_path / "model")
    out = tmp_path / "out"
    out.mkdir()
    torchrun = Path(sys.executable).with_name("torchrun")
    command = [
        str(torchrun), "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        "-m", "tests.trainer.colocated_rank", str(model), str(out),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["engine_index"] for r in results] == [0, 1]  # one engine per rank (TP 1)
    for r in results:
        assert r["gap_before_vs_old"] < TOLERANCE, r
        assert r["gap_after_vs_new"] < TOLERANCE, r
        assert r["gap_after_vs_old"] > 1e-3, r  # the load took
        assert r["weight_version"] == 1 and r["buckets"] > 10, r
        assert (r["slept"], r["woke"]) == (False, False), r  # the CPU backend has no sleep mode
