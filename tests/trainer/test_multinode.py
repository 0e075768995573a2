"""Two Ray nodes on this machine (``ray.cluster_utils.Cluster``, 1 CPU each): 2 FSDP ranks of 1 CPU
cannot share a node, so each node's placement group holds one (``ray_placement``), each rank hosting
its colocated engine. The ranks rendezvous at rank 0's node; the frame store, output folder and checkpoints are one
path both nodes see. A second run resumes from the first run's checkpoint on the same two nodes. After
each step's bucketed load the ranks score the next rollouts as the engines sampled them: the colocated
placement end to end (on one node the ranks only rendezvous closer)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 900


def test_two_ranks_and_two_engines_on_two_nodes_train_and_resume(tmp_path: Path) -> None:
    from ray.cluster_utils import Cluster

    from services.common.synthetic_tasks import make_task_datasets
    from services.common.tiny_models import build_tiny_model
    from services.trainer.tracking import read_metrics

    data = make_task_datasets(tmp_path / "data", train_videos=4, val_videos=2)
    model = build_tiny_model("qwen2_5_vl", tmp_path / "model")
    out = tmp_path / "run"
    # no dashboard: nothing here reads it, and beside another suite it once failed to start within
    # Ray's 40 s (the ranks' nodes come from the run's own log instead of the state API)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()

        def train(steps: int) -> subprocess.CompletedProcess:
            values = {
                "data.train_files": f"[{data['colour_mix']}]", "data.val_files": f"[{data['colour_val']}]",
                "data.batch_size": 2, "data.video_min_pixels": 3136, "data.video_max_pixels": 3136,
                "actor.model_path": str(model), "actor.world_size": 2, "rollout.n": 2,
                "rollout.placement": "colocated", "trainer.use_ray": "true", "ray_group.cpus_per_rank": 1,
                "trainer.ray_address": cluster.address, "trainer.output_dir": str(out),
                "trainer.total_steps": steps, "trainer.val_freq": 0, "trainer.save_freq": 1,
                "trainer.loggers": "[jsonl]",
                # validation (before the first step, after the last) on one sample: one engine serves
                # it and the other, with nothing to do, is left alone (the engines are independent)
                "trainer.val_limit": 1, "rollout.engine_timeout_s": 300,
            }  # fmt: skip
            command = [
                sys.executable,
                "-m",
                "services.cli",
                "train",
                str(ROOT / "examples" / "tiny_cpu.yaml"),
            ]
            command += [f"{k}={v}" for k, v in values.items()]
            env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"}
            env.pop("RAY_ADDRESS", None)
            return subprocess.run(
                command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
            )

        # two steps: the second rollout comes after an in-run bucketed load into each rank's engine
        first = train(2)
        assert first.returncode == 0, first.stderr[-6000:]
        assert "placement colocated" in first.stderr and "rollout engine on Ray" not in first.stderr
        second = train(3)  # trainer.resume defaults to auto: continues from step 2's checkpoint
        assert second.returncode == 0, second.stderr[-6000:]
        assert "resumed from" in second.stderr and "at step 2" in second.stderr
        rows = read_metrics(out / "metrics.jsonl")
        assert [r["step"] for r in rows if r["step"] > 0] == [1, 2, 3]
        assert [r["step"] for r in rows if "val/accuracy" in r] == [0, 2, 3]  # each run's validations
        for r in rows:
            if r["step"] > 0:
                assert r["actor/rollout_logprob_diff_max"] < 1e-4, r
        assert (out / "checkpoints" / "step_000003" / "optim_rank1.pt").exists()
        # a node's one CPU holds one rank, so each run's two ranks (and the engines inside them) were on
        # different nodes: 4 ranks over the two runs, 2 on each node
        runs = [rank_nodes(first.stderr), rank_nodes(second.stderr)]
        assert all(len(set(nodes)) == 2 for nodes in runs), runs
        every = runs[0] + runs[1]
        assert len(every) == 4 and sorted(every.count(n) for n in set(every)) == [2, 2], runs
    finally:
        cluster.shutdown()


def rank_nodes(stderr: str) -> list[str]:
    """The Ray node id of each rank, from the run's ``actor ranks on Ray: [...]`` log line."""
    (line,) = [line for line in stderr.splitlines() if "actor ranks on Ray: " in line]
    return re.findall(r"'node_id': '([0-9a-f]+)'", line)
