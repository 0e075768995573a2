"""`reelrl demo` end to end at a reduced size: the worker pool decodes the clips, vLLM serves both
evaluations and the training rollouts, and every phase runs as a job row with events. What it prints
(the before → after table) must agree with those rows and with the run's metrics file; the status page
it then serves lists both evaluations' scores, and SIGTERM stops it with status 0, leaking nothing."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from services.common.db.models import JobState
from services.common.jobs import list_jobs
from tests.trainer.actor_steps import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.e2e]

STEPS, VIDEOS = 2, 8  # a training batch (8); 4 held-out videos; the whole run ~2 min on 2 idle cores


def table_rows(text: str) -> dict[str, list[str]]:
    """The demo table's body rows, by their first cell (rich draws the table with box characters)."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) == 5 and cells[0] and not cells[0].startswith(("━", "─")):
            rows[cells[0]] = cells[1:]
    return rows


def left_behind(text: str) -> int:
    """Resources Python's resource tracker reported leaked and then found still there. It names each
    shared-memory segment it could not unlink because it was gone already (ENOENT): one the engine
    cleanup removed after vLLM force-killed the process that made it (engine_processes.release). Only
    the others were left behind."""
    leaked = sum(int(n) for n in re.findall(r"There appear to be (\d+) leaked \w+ objects", text))
    gone = len(re.findall(r"resource_tracker: '[^']+': \[Errno 2\] No such file or directory", text))
    return leaked - gone


def test_a_segment_already_removed_is_not_left_behind() -> None:
    removed = (
        "resource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leaked shared_memory "
        "objects to clean up at shutdown\n  warnings.warn('resource_tracker: There appear to be %d '\n"
        "resource_tracker.py:267: UserWarning: resource_tracker: '/psm_bc7611ba': [Errno 2] No such file "
        "or directory: '/psm_bc7611ba'\n"
    )
    assert left_behind(removed) == 0
    assert left_behind(removed.replace("1 leaked", "2 leaked")) == 1  # one more, which the tracker found
    assert left_behind("resource_tracker: There appear to be 3 leaked semaphore objects to clean up") == 3
    assert left_behind("") == 0


@pytest.mark.timeout(1500)  # ~100 s alone; 470 s was seen beside the learning test in the other session
def test_demo_prints_both_evaluations_and_records_its_jobs(reelrl_home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")} | {"COLUMNS": "120"}
    port = free_port()
    console_file = tmp_path / "console.txt"
    # As a new user runs it: the demo, then its status page, stopped the normal way (SIGTERM)
    with console_file.open("w") as console:
        demo = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "demo", "--port", str(port), "--dir", str(folder),
             "--steps", str(STEPS), "--videos", str(VIDEOS), "--workers", "2"],
            env=env, cwd=tmp_path, stdout=console, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            page = served_page(demo, port, console_file, timeout_s=1200)
            demo.send_signal(signal.SIGTERM)
            status = demo.wait(timeout=60)
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.wait()
    output = console_file.read_text()
    assert status == 0, output[-4000:]  # stopping the page is the demo's normal end

    held_out = len((folder / "data" / "colour_val.jsonl").read_text().splitlines())
    assert held_out == VIDEOS // 2
    rows = table_rows(output)
    assert set(rows) >= {"before training", f"after {STEPS} steps"}, output[-3000:]
    before, after = rows["before training"], rows[f"after {STEPS} steps"]
    for accuracy, samples, _format, _job in (before, after):
        assert 0.0 <= float(accuracy) <= 1.0
        assert int(samples) == held_out  # every held-out sample scored, none missing
    assert 0.0 <= float(after[2]) <= 1.0  # the trained model's validation format score

    # The jobs it ran are real job rows, finished, with the ids the table names.
    jobs, total = list_jobs()
    assert total == 3 and all(j.state == JobState.succeeded for j in jobs), [
        (j.kind, j.state, j.reason) for j in jobs
    ]
    evals = sorted((j for j in jobs if j.kind == "eval"), key=lambda j: j.created_at)
    (train,) = [j for j in jobs if j.kind == "train"]
    assert [j.id[:8] for j in evals] == [before[3], after[3]]
    # the table shows each evaluation's own figure, as a fraction (eval summaries hold percentages)
    for row, job in zip((before, after), evals, strict=True):
        assert float(row[0]) == pytest.approx(job.result["video_r1/overall"] / 100, abs=5e-4)
    assert train.result["steps"] == STEPS and train.progress.done == STEPS
    # summary.json (what bench/bench_demo.py reads) holds the table's figures and the same jobs
    summary = json.loads((folder / "summary.json").read_text())
    for side, row, job in (("before", before, evals[0]), ("after", after, evals[1])):
        assert f"{summary[side]['accuracy']:.3f}" == row[0] and summary[side]["samples"] == held_out
        assert summary[side]["job_id"] == job.id
    assert summary["steps"] == STEPS and summary["train_videos"] == VIDEOS and summary["minutes"] > 0

    # The metrics file it points at holds every step once (0: the validation before training).
    path = Path(re.search(r"metrics: (\S+metrics\.jsonl)", output.replace("\n", "")).group(1))
    assert path == Path(train.result["output_dir"]) / "metrics.jsonl"
    steps = [json.loads(line)["step"] for line in path.read_text().splitlines()]
    assert steps == list(range(STEPS + 1))

    # A clean console: vLLM's, torch's and the workers' output is in the log the demo names at the end.
    log = Path(re.search(r"worker output: (\S+demo\.log)", output.replace("\n", "")).group(1))
    logged = log.read_text()
    assert "EngineCore" in logged or "vllm" in logged, logged[-2000:]
    noise = ("INFO", "WARNING", "EngineCore", "Warning:", "warnings.warn", "Traceback", "tcmalloc", "NUMA")
    shown = [line for line in output.splitlines() if any(word in line for word in noise)]
    assert not shown, shown[:10]
    # nothing left behind after the stop (Python's resource tracker names what a process leaked; a
    # segment of an engine process that vLLM force-killed is removed by the engine's cleanup)
    assert left_behind(output) == 0 and left_behind(log.read_text()) == 0, log.read_text()[-2000:]

    # The page it served lists the two evaluations with their scores, side by side with the train job.
    for job in evals:
        assert f'<td class="headline">{job.headline}</td>' in page, page[-3000:]


def served_page(demo: subprocess.Popen, port: int, console: Path, timeout_s: float) -> str:
    """The jobs page, once the demo has finished and serves it (the demo must not end first)."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert demo.poll() is None, console.read_text()[-4000:]
        if "status page:" in console.read_text():
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
                if response.status_code == 200:
                    return response.text
            except httpx.HTTPError:
                pass
        assert time.monotonic() < deadline, "the demo did not serve its page in time"
        time.sleep(0.5)
