"""The evaluation pipeline end to end on a tiny Qwen2.5-VL, real clips, vLLM on CPU and the embedded
database: `reelrl eval run` is killed mid-run (SIGKILL), then the run is finished by the Celery task body
of `reelrl.eval.run` under a job. Finished samples are not recomputed, no row is duplicated, and the
outputs, manifests, judge replies, progress and result events are checked. Two engine starts in all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from services.common.settings import reset_settings_cache
from tests.eval.conftest import write_json

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_ID = "resume-test"
BENCHMARKS = ["mvbench", "videoreasonbench", "charades_sta", "mlvu"]
COUNTS = {"mvbench": 8, "videoreasonbench": 2, "charades_sta": 2, "mlvu": 2}
OVERRIDES = {
    "run_id": RUN_ID,
    "video.nframes": 4,
    "video.min_pixels": 3136,
    "video.max_pixels": 6272,
    "rollout.max_tokens": 256,  # long enough answers that the kill lands between results
    "rollout.engine.max_model_len": 2048,
    "rollout.engine.kv_cache_gib": 0.25,
    "rollout.engine.dtype": "float32",
    "judge.model": "self",
    "judge.max_tokens": 4,
    "preprocess_workers": 1,
    "loggers": "[mlflow]",  # the summaries also go to MLflow's local store (OUTPUT_DIR/mlruns)
}


def make_data(root: Path) -> Path:
    from services.common.frames.synthetic import make_video

    data = root / "data"
    clips = data / "mvbench" / "video" / "star" / "Charades_v1_480"
    clips.mkdir(parents=True)
    for i in range(2):
        make_video(clips / f"v{i}.mp4", seconds=2.0, fps=10, width=160, height=120)
    records = [
        {"video": f"v{i % 2}.mp4", "question": f"What happens in scene {i}?", "candidates": ["a", "b", "c"],
         "answer": "b"}
        for i in range(COUNTS["mvbench"])
    ]  # fmt: skip
    write_json(data / "mvbench" / "json" / "action_sequence.json", records)
    (data / "videoreasonbench" / "videos" / "card").mkdir(parents=True)
    make_video(
        data / "videoreasonbench" / "videos" / "card" / "s1.mp4", seconds=2.0, fps=10, width=160, height=120
    )
    questions = {
        str(i): {"video": "videos/card/s1.mp4", "question": f"Which card is on top after move {i}?",
                 "answer": "the queen of clubs", "dim": "order_operation", "num_state": 1, "num_operation": i + 1}
        for i in range(2)
    }  # fmt: skip
    write_json(data / "videoreasonbench" / "questions" / "card.json", questions)
    (data / "charades_sta" / "Charades_v1_480").mkdir(parents=True)
    make_video(
        data / "charades_sta" / "Charades_v1_480" / "c0.mp4", seconds=2.0, fps=10, width=160, height=120
    )
    make_video(data / "mlvu" / "video" / "1_plotQA" / "m0.mp4", seconds=2.0, fps=10, width=160, height=120)
    plot = [
        {"video": "m0.mp4", "duration": 2, "question": f"What colour is square {i}?",
         "candidates": ["red", "green", "blue"], "answer": "green", "question_type": "plotQA"}
        for i in range(COUNTS["mlvu"])
    ]  # fmt: skip
    write_json(data / "mlvu" / "json" / "1_plotQA.json", plot)
    (data / "charades_sta" / "charades_sta_test.txt").write_text(
        "c0 0.0 1.0##a square moves.\ngone 0.5 1.5##a video that is missing.\n"
    )
    return data


def result_rows(run_id: str) -> list[tuple[int, str, str, object, str | None]]:
    from sqlalchemy import select

    from services.common.db import session_scope
    from services.common.db.models import EvalResult

    with session_scope() as session:
        rows = session.execute(
            select(
                EvalResult.id,
                EvalResult.benchmark,
                EvalResult.sample_id,
                EvalResult.created_at,
                EvalResult.response,
            )
            .where(EvalResult.run_id == run_id)
            .order_by(EvalResult.id)
        )
        return [tuple(r) for r in rows]


def shm_segments(processes: list[psutil.Process]) -> set[Path]:
    """The /dev/shm/psm_* segments these processes map (vLLM's shared-memory message queues)."""
    found = set()
    for process in processes:
        try:
            maps = Path(f"/proc/{process.pid}/maps").read_text()
        except OSError:
            continue
        found |= {Path(line.split()[-1]) for line in maps.splitlines() if "/dev/shm/psm_" in line}
    return found


def mapped_anywhere(segment: Path) -> bool:
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            if segment.name in maps.read_text():
                return True
        except OSError:
            continue
    return False


def kill_mid_run(command: list[str], env: dict[str, str], at_least: int, log: Path) -> None:
    """Start the CLI in its own process group; once ``at_least`` results are stored, freeze the group
    (SIGSTOP) and SIGKILL it (the worker and its engine processes, as when a machine or container
    dies). The shared memory the killed engine mapped is then unlinked, as its dead owner never will."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + 600
    try:
        while len(result_rows(RUN_ID)) < at_least:
            if proc.poll() is not None:
                pytest.fail(
                    f"eval run exited ({proc.returncode}) before {at_least} results:\n{log.read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"no {at_least} results in time:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGSTOP)  # freeze at once: no result is written after this point
        group = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        segments = shm_segments(group)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(group, timeout=30)
    assert not alive, f"processes of the killed run still alive: {alive}"
    for segment in segments:
        if segment.exists() and not mapped_anywhere(segment):
            segment.unlink()


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """Attempt 1 (CLI, killed after 3 results) then attempt 2 (the eval job's task body)."""
    from services.common.tiny_models import build_tiny_model

    root = tmp_path_factory.mktemp("eval-pipeline")
    model = build_tiny_model("qwen2_5_vl", root / "model", seed=0)
    data = make_data(root)
    home = root / "home"
    with pytest.MonkeyPatch.context() as mp:
        for var in list(os.environ):
            if var.startswith("REELRL_") and not var.startswith("REELRL_TEST_"):
                mp.delenv(var)
        mp.setenv("REELRL_HOME", str(home))
        mp.setenv("REELRL_JOB_HEARTBEAT_S", "1")
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        reset_settings_cache()
        # attempt 1: one request at a time, so the kill lands between results
        command = [sys.executable, "-m", "services.cli", "eval", "run", "--model", str(model),
                   "--benchmarks", ",".join(BENCHMARKS), "--data-root", str(data),
                   *(f"{k}={v}" for k, v in OVERRIDES.items()), "concurrency=1", "queue_size=1", "io_threads=1"]  # fmt: skip
        kill_mid_run(command, dict(os.environ), at_least=3, log=root / "attempt1.log")
        before = result_rows(RUN_ID)

        # attempt 2: the eval job resumes the run (same run id and settings, more concurrency)
        from services.common.jobs import create_job, get_job, job_events
        from services.eval.cli import parse_assignments
        from services.eval.config import EvalConfig
        from services.eval.tasks import eval_job

        config = EvalConfig.model_validate(
            {"model": str(model), "benchmarks": BENCHMARKS, "data_root": str(data),
             **parse_assignments([f"{k}={v}" for k, v in OVERRIDES.items()]), "concurrency": 4}
        ).model_dump(mode="json")  # fmt: skip
        job_id = create_job("eval", config)
        eval_job.run(job_id)
        yield {
            "root": root, "home": home, "model": model, "data": data, "before": before,
            "after": result_rows(RUN_ID), "job": get_job(job_id), "events": job_events(job_id),
            "output": home / "eval" / RUN_ID,
        }  # fmt: skip
    reset_settings_cache()


def test_killed_run_resumes_without_recompute_or_duplicates(resumed):
    before, after = resumed["before"], resumed["after"]
    total = sum(COUNTS.values())
    assert 3 <= len(before) < total, f"the kill did not land mid-run ({len(before)} of {total} results)"
    assert len(after) == total
    keys = [(benchmark, sample) for _, benchmark, sample, _, _ in after]
    assert len(set(keys)) == total  # no duplicates
    assert after[: len(before)] == before  # the first attempt's rows untouched (ids, times, answers)
    job = resumed["job"]
    assert job.state.value == "succeeded", job.reason
    assert job.result["resumed"] == len(before) and job.result["written"] == total - len(before)


def test_the_summaries_reach_mlflow_once_per_attempt_that_finished(resumed):
    from mlflow import MlflowClient

    from services.common.trackers import local_store

    out = resumed["output"]
    summary = json.loads((out / "summary.json").read_text())
    client = MlflowClient(tracking_uri=local_store(out / "mlruns"))
    runs = client.search_runs([client.get_experiment_by_name("reelrl-eval").experiment_id])
    # the killed attempt reached no summary; the job's attempt logged one step
    assert [r.info.run_id for r in runs] == [json.loads((out / "trackers.json").read_text())["mlflow"]["id"]]
    run = runs[0]
    assert run.info.status == "FINISHED" and run.info.run_name == f"eval-{RUN_ID}"
    for benchmark in BENCHMARKS:
        history = client.get_metric_history(run.info.run_id, f"eval/{benchmark}/overall")
        assert [(m.step, m.value) for m in history] == [(0, summary[benchmark]["overall"])], benchmark
    cells = [(b, k, cell) for b, by in summary["mvbench"]["breakdowns"].items() for k, cell in by.items()]
    assert cells
    for breakdown, key, cell in cells:
        assert run.data.metrics[f"eval/mvbench/breakdowns/{breakdown}/{key}/count"] == cell["count"]


def test_progress_and_result_events(resumed):
    events = resumed["events"]
    progress = [e.data for e in events if e.type == "progress"]
    remaining = sum(COUNTS.values()) - len(resumed["before"])
    assert progress[-1]["done"] == progress[-1]["total"] == remaining
    results = {e.data["benchmark"]: e.data for e in events if e.type == "result"}
    assert set(results) == set(BENCHMARKS)
    assert results["mvbench"]["samples"] == 8 and "by task" in results["mvbench"]
    assert results["charades_sta"]["errors"] == 1 and "mIoU" in results["charades_sta"]
    assert results["mvbench"]["manifest"]["clip"]["nframes"] == 4


def test_outputs_manifests_and_judge(resumed):
    from services.eval.benchmarks import get_benchmark

    out = resumed["output"]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == set(BENCHMARKS)
    assert "| mvbench |" in (out / "summary.md").read_text()
    lines = {
        b: [json.loads(x) for x in (out / f"{b}.samples.jsonl").read_text().splitlines()] for b in BENCHMARKS
    }
    assert {b: len(v) for b, v in lines.items()} == COUNTS
    first = lines["mvbench"][0]
    manifest = first["manifest"]
    assert manifest["model"] == str(resumed["model"].resolve()) and manifest["family"] == "qwen2_5_vl"
    assert manifest["clip"]["nframes"] == 4 and manifest["clip"]["max_pixels"] == 6272
    assert manifest["sampling"]["temperature"] == 0.0 and manifest["sampling"]["max_tokens"] == 256
    assert manifest["code_version"].startswith("0.1.0")
    bench = get_benchmark("mvbench")
    (sample, *_) = bench.load(bench.find_annotations(resumed["data"] / "mvbench"))
    assert manifest["prompt_template_version"] == bench.prompt_version(sample)
    assert first["clip_meta"][0]["source_width"] == 160 and first["prompt_tokens"] > 0
    judged = lines["videoreasonbench"]
    assert all(line["judged"] and line["judge_response"] is not None for line in judged)
    # MLVU's answer prefix: in the manifest and the line, stored apart from the generated response
    assert {(line["assistant_prefix"], line["manifest"]["assistant_prefix"]) for line in lines["mlvu"]} == {
        ("Best Option: (", "Best Option: (")
    }
    assert all(not line["response"].startswith("Best Option") for line in lines["mlvu"])
    assert {line["assistant_prefix"] for line in lines["videoreasonbench"]} == {""}  # no prefix: written ""
    missing = next(line for line in lines["charades_sta"] if line["id"] == "charades_sta_test/1")
    assert "video file not found" in missing["error"] and missing["response"] is None


def test_saved_predictions_rescore_to_the_same_summary(resumed):
    """The per-sample JSONL is what `reelrl eval score` reads: re-scoring it reproduces each summary."""
    from services.eval.benchmarks import get_benchmark
    from services.eval.scoring import read_predictions, score_predictions

    out = resumed["output"]
    for name in BENCHMARKS:
        bench = get_benchmark(name, resumed["data"] / name)
        samples = bench.load_checked(bench.find_annotations(resumed["data"] / name))
        predictions = read_predictions(out / f"{name}.samples.jsonl")
        rescored = bench.aggregate(samples, score_predictions(bench, samples, predictions, "qwen2_5_vl"))
        stored = json.loads((out / f"{name}.summary.json").read_text())
        assert rescored.overall == pytest.approx(stored["overall"]), name
        assert rescored.metrics == pytest.approx(stored["metrics"]), name
