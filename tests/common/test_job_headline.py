"""A finished job's one-line headline (services/common/job_headline.py), hand-computed, and where it
shows: the job's JSON (so the live jobs list can fill it in) and the jobs page's result column."""

from __future__ import annotations

import pytest

from services.common.job_headline import headline


@pytest.mark.parametrize(
    ("kind", "result", "expected"),
    [
        ("eval", {"run_id": "r", "written": 16, "video_r1/overall": 56.25}, "video_r1 56.2%"),
        # benchmarks in name order, whatever order the result lists them in
        ("eval", {"mvbench/overall": 40.0, "lvbench/overall": 33.333}, "lvbench 33.3% · mvbench 40.0%"),
        ("eval", {"video_r1/overall": float("nan"), "x/overall": "n/a"}, None),
        ("eval", {"run_id": "r"}, None),
        (
            "train",
            {"steps": 150, "val/accuracy": 0.5625, "checkpoint": "c"},
            "held-out accuracy 0.562 after 150 steps",
        ),
        ("train", {"steps": 3}, "3 steps"),
        ("train", {"val/accuracy": True}, None),  # a bool is no score
        ("preprocess", {"clips": 12, "failed": 0, "samples": 12}, "12 clips"),
        ("preprocess", {"clips": 12, "failed": 2}, "12 clips, 2 failed rows"),
        ("eval", None, None),
        ("other", {"x/overall": 1.0}, None),
    ],
)
def test_headline(kind, result, expected):
    assert headline(kind, result) == expected


def test_the_job_json_and_the_jobs_page_carry_the_headline(reelrl_home):
    from fastapi.testclient import TestClient

    from services.api.app import create_app
    from services.api.settings import ApiSettings
    from services.common.jobs import create_job, get_job, run_job

    job_id = create_job("eval", {})
    with run_job(job_id) as ctx:
        ctx.set_result({"video_r1/overall": 56.25})
    assert get_job(job_id).model_dump(mode="json")["headline"] == "video_r1 56.2%"
    with TestClient(create_app(ApiSettings(allowed_hosts="testserver"))) as client:
        assert client.get(f"/v1/jobs/{job_id}").json()["headline"] == "video_r1 56.2%"
        page = client.get("/").text
    assert '<td class="headline">video_r1 56.2%</td>' in page
