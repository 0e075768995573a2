"""Tensor parallel 2 on CPU, colocated: 2 gloo ranks host ONE vLLM engine together (each rank a TP shard
of it, in its own process: vLLM's external_launcher over the ranks' process group). The ranks are one
engine: the same tokens and log-probs on both. A bucketed push from an FSDP2 actor sharded over the same
ranks gives each rank its own slice of every weight, and the engine then scores as the HF model with the
new weights does."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from services.rollout.environment import core_share
from tests.trainer.colocated_rank import torchrun

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TOLERANCE = 1e-4  # as tests/trainer/test_colocated.py (TP 1)
TIMEOUT_S = 600
SHM = Path("/dev/shm")
#: vLLM's CPU communicator fails this way when its segment name is taken (docs/rollout.md)
NAME_TAKEN = "create shm in SHMManager failed. errno: 17"
NAME_TAKEN_HINT = (
    "\n(the TP group's /dev/shm segment name was taken: left by a TP-2 run that crashed, or held by one "
    'running on this host; docs/rollout.md, "Tensor parallel on CPU")'
)


def test_two_ranks_host_one_tp2_engine_and_each_loads_its_slice(tmp_path: Path) -> None:
    from services.common.tiny_models import build_tiny_model

    model = build_tiny_model("qwen2_5_vl", tmp_path / "model")
    out = tmp_path / "out"
    out.mkdir()
    command = torchrun("tests.trainer.colocated_tp_rank", model, out)
    proc = subprocess.Popen(
        command, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    finally:
        _stop_group(proc)
        leaked = _unlink_leaked_segments(out)
    hint = "" if NAME_TAKEN not in stderr else NAME_TAKEN_HINT
    assert proc.returncode == 0, stdout[-3000:] + stderr[-6000:] + hint
    assert not leaked, f"the ranks left shared-memory segments behind: {leaked}"
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]

    # one engine: both ranks hold engine 0, one TP group over ranks [0, 1] in rank order, no other replica
    assert [r["engine_index"] for r in results] == [0, 0]
    for rank, r in enumerate(results):
        layout = r["layout"]
        assert (layout["tp_size"], layout["tp_rank"], layout["tp_ranks"]) == (2, rank, [0, 1]), layout
        assert layout["dp_ranks"] == layout["pp_ranks"] == [rank], layout  # DP 1, PP 1
        # vLLM's CPU communicator talks through shared memory, one segment per rank, gone at exit
        assert layout["communicator"] == "CpuCommunicator", layout
        assert layout["transport"] == "_CPUSHMDistributed", layout
        assert r["segments_during_run"] == r["segments"] and len(r["segments"]) == 2, r["segments"]
    cores = sorted(os.sched_getaffinity(0))
    assert [r["cores"] for r in results] == [core_share(cores, r, 2) for r in range(2)]

    # the shards of one engine generate the same tokens with the same log-probs
    for key in ("ids_before", "ids_after", "logprobs_after"):
        assert results[0][key] == results[1][key], key
    for r in results:
        assert r["gap_before_vs_old"] < TOLERANCE, r
        assert r["gap_after_vs_new"] < TOLERANCE, r
        assert r["gap_after_vs_old"] > 1e-3, r  # the load took
        assert r["weight_version"] == 1 and r["buckets"] > 10, r

    # the names each rank loads: every engine parameter, the same names on both ranks; the values are
    # each rank's own slice (half the vocabulary rows, its query head beside the replicated KV head,
    # its third of the vision tower's fused q, k and v)
    assert results[0]["loaded"] == results[0]["expected"] == results[1]["loaded"], results[0]["loaded"]
    for r in results:
        assert r["shapes"] == {
            "language_model.model.embed_tokens.weight": [576, 128],  # vocabulary 1152 / 2
            "language_model.lm_head.weight": [576, 128],
            "language_model.model.layers.0.self_attn.qkv_proj.bias": [64 + 64 + 64],  # 1 of 2 q heads, k, v
            "visual.blocks.0.attn.qkv.bias": [3 * 32],  # half of each 64-wide q, k, v
        }, r["shapes"]
        assert all(gap == 0.0 for gap in r["slice_gaps"].values()), r["slice_gaps"]


def _stop_group(proc: subprocess.Popen) -> None:
    """torchrun and its ranks share a session: SIGKILL whatever of it is left (nothing, after a clean run)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _unlink_leaked_segments(out: Path) -> list[str]:
    """The shared-memory segments this run's ranks named (``OUT/segments_rank*.txt``, written as soon as
    their engine started; vLLM's CPU communicator, one per rank) that no process maps any more: a rank
    killed mid-run cannot unlink its own. Removes them and returns their names; no other segment on
    the host is touched."""
    named = {n for f in out.glob("segments_rank*.txt") for n in f.read_text().split()}
    mapped: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            lines = maps.read_text().splitlines()
            mapped |= {line.split(maxsplit=5)[5] for line in lines if "cpushm_" in line}
        except (OSError, IndexError):
            continue
    leaked = []
    for name in sorted(named):
        segment = SHM / name
        if str(segment) in mapped:
            continue
        try:
            segment.unlink()
            leaked.append(name)
        except FileNotFoundError:
            continue
    return leaked
