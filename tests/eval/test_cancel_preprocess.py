"""An eval job cancelled while its clips are being preprocessed stops there, within seconds: the real
task body, the jobs database and the embedded broker, with no preprocess worker running, so the wait
for the clip would never end by itself."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.eval.conftest import write_json

pytestmark = [pytest.mark.integration]


def test_a_cancel_while_clips_preprocess_ends_the_eval_job(reelrl_home: Path, tmp_path: Path, monkeypatch):
    from services.common.frames.synthetic import make_video
    from services.common.jobs import create_job, get_job, request_cancel
    from services.common.tiny_models import build_tiny_model
    from services.eval.config import EvalConfig
    from services.eval.tasks import eval_job

    monkeypatch.setenv("REELRL_JOB_HEARTBEAT_S", "0.2")  # the cancel reaches the body within 0.2 s
    data = tmp_path / "data"
    make_video(data / "mlvu" / "video" / "1_plotQA" / "m0.mp4", seconds=1.0, fps=4, width=64, height=48)
    write_json(
        data / "mlvu" / "json" / "1_plotQA.json",
        [{"video": "m0.mp4", "duration": 1, "question": "What colour is the square?",
          "candidates": ["red", "green"], "answer": "green", "question_type": "plotQA"}],
    )  # fmt: skip
    model = build_tiny_model("qwen2_5_vl", tmp_path / "model", seed=0)
    config = EvalConfig.model_validate(
        # 0 local workers: the clip waits for `reelrl worker preprocess`, which nobody started
        {"model": str(model), "benchmarks": ["mlvu"], "data_root": str(data), "preprocess_workers": 0,
         "run_id": "cancel-in-preprocess"}
    ).model_dump(mode="json")  # fmt: skip
    job_id = create_job("eval", config)

    outcome: dict[str, BaseException] = {}

    def work() -> None:
        try:
            eval_job.run(job_id)
        except BaseException as exc:  # recorded for the assertion below
            outcome["error"] = exc

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    output = reelrl_home / "eval" / "cancel-in-preprocess"
    deadline = time.monotonic() + 120
    while not list(output.glob("preprocess-*")) and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(output.glob("preprocess-*")), f"the job never reached its preprocessing: {outcome}"
    request_cancel(job_id)
    worker.join(timeout=30)
    assert not worker.is_alive(), "the eval job went on waiting for its clips after the cancel"
    assert "error" not in outcome, outcome
    job = get_job(job_id)
    assert (job.state.value, job.reason) == ("cancelled", "cancelled on request")
    from services.common.db import session_scope
    from services.eval.store import EvalRun

    with session_scope() as session:
        assert session.get(EvalRun, "cancel-in-preprocess").status == "cancelled"
