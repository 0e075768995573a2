"""`reelrl preprocess` on embedded defaults: SQLite, filesystem broker, real celery worker processes."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from services.common.db import ClipStatus, FrameClip, session_scope
from services.common.frames import FrameStore, VideoParams
from services.common.frames.synthetic import make_video
from services.common.settings import reset_settings_cache
from services.preprocess.dataset import read_jsonl
from services.preprocess.dispatch import run_preprocess

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _table_value(text: str, label: str) -> str:
    """The value cell of the table row labelled ``label``."""
    rows = [line for line in text.splitlines() if re.match(rf"\W*{re.escape(label)}\s*│", line)]
    assert len(rows) == 1, text
    return rows[0].split("│")[-2].strip()


def test_bad_inputs_fail_alone_and_the_batch_completes(
    reelrl_home, data_dir, tmp_path, monkeypatch, write_dataset
):
    outside = tmp_path / "outside.mp4"
    outside.write_bytes((data_dir / "videos" / "short.mp4").read_bytes())
    (data_dir / "videos" / "empty.mp4").write_bytes(b"")
    (data_dir / "videos" / "notes.mp4").write_text("not a video\n" * 40)
    good = (data_dir / "videos" / "wide.mp4").read_bytes()
    (data_dir / "videos" / "truncated.mp4").write_bytes(good[: len(good) // 3])
    monkeypatch.setenv("REELRL_DATA_ROOTS", str(data_dir))
    reset_settings_cache()
    dataset = write_dataset(
        tmp_path / "in.jsonl",
        [
            {"id": "ok-1", "videos": ["videos/short.mp4"], "answer": "A"},
            {"id": "missing", "videos": ["videos/nope.mp4"]},
            {"id": "empty", "videos": ["videos/empty.mp4"]},
            {"id": "text", "videos": ["videos/notes.mp4"]},
            {"id": "truncated", "videos": ["videos/truncated.mp4"]},
            {"id": "outside", "videos": [str(outside)]},
            {"id": "escape", "videos": ["../outside.mp4"]},
            {"id": "absurd", "videos": ["videos/tall.mp4"], "video_params": {"max_frames": 0}},
            {"id": "tiny-pixels", "videos": ["videos/tall.mp4"], "video_params": {"max_pixels": 10}},
            "{not json",
            {"id": "ok-2", "videos": ["videos/tall.mp4", "videos/wide.mp4"]},
            {"id": "no-video", "problem": "text only"},
        ],
    )
    out = tmp_path / "out.jsonl"
    report = run_preprocess(dataset, out, VideoParams(max_frames=8), workers=1, timeout_s=240)

    ok = {r["id"]: r for r in read_jsonl(out)}
    assert set(ok) == {"ok-1", "ok-2", "no-video"}
    assert len(ok["ok-2"]["clips"]) == 2 and ok["no-video"]["clips"] == []
    assert ok["ok-1"]["answer"] == "A"  # input fields are kept
    failed = {r.get("id", "bad-json"): r["error"] for r in read_jsonl(out.with_name("out.failed.jsonl"))}
    expectations = {
        "missing": "videos/nope.mp4: file not found",
        "empty": "videos/empty.mp4: file is empty (0 bytes)",
        "text": "videos/notes.mp4 · decord, pyav · no decoder could read it",
        "truncated": "videos/truncated.mp4 · decord, pyav · no decoder could read it",
        "outside": "outside the data roots",
        "escape": "outside the data roots",
        "absurd": "invalid video_params: max_frames",
        "tiny-pixels": "invalid video_params: max_pixels=10 is below one 28x28 patch",
        "bad-json": "line 10: invalid JSON",
    }
    assert set(failed) == set(expectations)
    for sample, fragment in expectations.items():
        assert fragment in failed[sample], (sample, failed[sample])
    assert failed["text"].count("notes.mp4") == 1, failed["text"]  # the path once
    assert (report.samples, report.succeeded, report.failed, report.clip_failures) == (12, 3, 9, 2)

    store = FrameStore.from_settings()
    for row in ok.values():
        # Each clip's decode parameters travel with it, aligned with `clips`, for consumers to check.
        assert row["clip_params"] == [VideoParams(max_frames=8).canonical()] * len(row["clips"])
        for key, params in zip(row["clips"], row["clip_params"], strict=True):
            frames, meta = store.load(key, expect=params)
            assert frames.shape[0] == meta["num_frames"] <= 8
    with session_scope() as session:
        failed_clips = session.scalars(select(FrameClip).where(FrameClip.status == ClipStatus.failed)).all()
        assert len(failed_clips) == 2 and all(c.error for c in failed_clips)

    # Run again: the two undecodable files (same bytes, same parameters) are not decoded again.
    again = run_preprocess(dataset, out, VideoParams(max_frames=8), workers=1, timeout_s=240)
    assert (again.failed, again.clip_failures, again.known_failed, again.cached) == (9, 0, 2, 3)
    refailed = {r.get("id"): r["error"] for r in read_jsonl(out.with_name("out.failed.jsonl"))}
    for sample in ("text", "truncated"):
        assert "no decoder could read it" in refailed[sample]
        assert "(failed in an earlier run; --retry-failed decodes it again)" in refailed[sample]
    with session_scope() as session:
        assert sorted(c.attempts for c in session.scalars(select(FrameClip)).all()) == [1] * 5


def test_a_file_every_decoder_fails_on_fails_at_once_in_a_real_worker(
    reelrl_home, tmp_path, monkeypatch, write_dataset
):
    # decord alone: it opens H.264 with B-frames in MPEG-TS, then raises its own DECORDError decoding
    # it. The clip must fail on its first attempt with decord's reason, not sit "running" until its
    # lease lapses and be retried (the run's timeout would expire first).
    ts = make_video(tmp_path / "bframes.ts", seconds=3, fps=25, bframes=2, gop_seconds=None)
    monkeypatch.setenv("REELRL_DECODERS", "decord")
    reset_settings_cache()
    dataset = write_dataset(tmp_path / "in.jsonl", [{"id": "ts", "videos": [str(ts)]}])
    out = tmp_path / "out.jsonl"
    report = run_preprocess(dataset, out, VideoParams(max_frames=4), workers=1, timeout_s=90)
    assert (report.failed, report.clip_failures) == (1, 1)
    (row,) = read_jsonl(out.with_name("out.failed.jsonl"))
    assert row["error"].startswith(f"line 1: {ts} · decord · no decoder could read it: decord: decord cannot")
    assert row["error"].count(str(ts)) == 1, row["error"]
    with session_scope() as session:
        (clip,) = session.scalars(select(FrameClip)).all()
        assert (clip.status, clip.attempts) == (ClipStatus.failed, 1)


def test_dedup_and_cache_hits(reelrl_home, data_dir, tmp_path, write_dataset):
    copy = data_dir / "videos" / "copy_of_short.mp4"
    copy.write_bytes((data_dir / "videos" / "short.mp4").read_bytes())
    dataset = write_dataset(
        tmp_path / "in.jsonl",
        [
            {"id": "a", "videos": [str(data_dir / "videos/short.mp4")]},
            {"id": "b", "videos": [str(data_dir / "videos/short.mp4")]},
            {"id": "c", "videos": [str(copy)]},  # same bytes, other path: the same clip
            {"id": "d", "videos": [str(data_dir / "videos/wide.mp4")], "video_params": {"fps": 1.0}},
        ],
    )
    out = tmp_path / "out.jsonl"
    first = run_preprocess(dataset, out, VideoParams(max_frames=8), workers=1, timeout_s=240)
    rows = read_jsonl(out)
    assert rows[0]["clips"] == rows[1]["clips"] == rows[2]["clips"]
    assert (first.clips, first.cached, first.decoded) == (2, 0, 2)
    again = run_preprocess(
        dataset, tmp_path / "again.jsonl", VideoParams(max_frames=8), workers=1, timeout_s=240
    )
    assert (again.clips, again.cached, again.decoded) == (2, 2, 0)
    assert read_jsonl(tmp_path / "again.jsonl") == rows
    # A clip whose entry vanished from disk (ready in the index) is decoded again, not handed out.
    FrameStore.from_settings().remove(rows[3]["clips"][0])
    third = run_preprocess(
        dataset, tmp_path / "third.jsonl", VideoParams(max_frames=8), workers=1, timeout_s=240
    )
    assert (third.clips, third.cached, third.decoded, third.failed) == (2, 1, 1, 0)
    assert read_jsonl(tmp_path / "third.jsonl") == rows
    assert FrameStore.from_settings().entry_problem(rows[3]["clips"][0]) is None
    with session_scope() as session:
        clips = session.scalars(select(FrameClip)).all()
        assert sorted(c.attempts for c in clips) == [1, 1]
        short = next(c for c in clips if c.key == rows[0]["clips"][0])
        assert sorted(short.asset.paths) == sorted([str(data_dir / "videos/short.mp4"), str(copy)])


@pytest.mark.e2e
def test_cli_end_to_end(reelrl_home, tmp_path):
    env = {**os.environ, "REELRL_HOME": str(reelrl_home)}
    reelrl = [sys.executable, "-m", "services.cli"]
    subprocess.run([*reelrl, "make-sample-data", str(tmp_path / "demo")], check=True, env=env)
    done = subprocess.run(
        [*reelrl, "preprocess", str(tmp_path / "demo/train.jsonl"), "--out", str(tmp_path / "out.jsonl"),
         "--max-frames", "8", "--workers", "2", "--timeout", "240"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "8 samples: 8 ok, 0 failed" in done.stderr and "4 decoded" in done.stderr
    # The local workers' own log lines go to their log file, not into the command's output.
    assert "Warm shutdown" not in done.stdout + done.stderr
    assert "Warm shutdown" in (reelrl_home / "logs" / "preprocess-workers.log").read_text()
    rows = [json.loads(line) for line in Path(tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(len(r["clips"]) == 1 for r in rows)
    stats = subprocess.run([*reelrl, "cache", "stats"], env=env, capture_output=True, text=True, check=True)
    assert _table_value(stats.stdout, "clips ready") == "4"
    # 8 rows, 2 per clip; every clip was being decoded when its second row asked: no hit yet.
    assert _table_value(stats.stdout, "requests / hits") == "8 / 0"
    bad = subprocess.run(
        [*reelrl, "preprocess", str(tmp_path / "demo/train.jsonl"), "--max-frames", "0"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and "invalid max_frames" in bad.stderr


@pytest.mark.e2e
def test_cli_failures_exit_1_escaped_and_counted(reelrl_home, video_dir, tmp_path, write_dataset):
    env = {**os.environ, "REELRL_HOME": str(reelrl_home)}
    reelrl = [sys.executable, "-m", "services.cli"]
    # A folder name that is Rich markup: printing it unescaped crashes (MarkupError) or vanishes.
    odd = tmp_path / "data [/bold] [red]x"
    odd.mkdir(parents=True)  # "data [" holding "bold] [red]x": the path reads "data [/bold] [red]x"
    (odd / "ok.mp4").write_bytes((video_dir / "short.mp4").read_bytes())
    (odd / "notes.mp4").write_text("not a video\n" * 40)
    rows = [{"id": "ok", "videos": [str(odd / "ok.mp4")]}, {"id": "text", "videos": [str(odd / "notes.mp4")]}]
    rows += [{"id": f"gone-{i}", "videos": [str(odd / f"gone-{i}.mp4")]} for i in range(5)]
    dataset = write_dataset(odd / "in.jsonl", rows)
    out = odd / "out.jsonl"
    run = [*reelrl, "preprocess", str(dataset), "--out", str(out), "--max-frames", "4", "--timeout", "240"]

    first = subprocess.run(run, env=env, capture_output=True, text=True)
    assert first.returncode == 1, first.stderr
    assert "Traceback" not in first.stderr and "Warm shutdown" not in first.stderr
    assert "7 samples: 1 ok, 6 failed | 2 clips: 0 already cached, 1 decoded, 1 failed" in first.stderr
    assert f"wrote {out}" in first.stderr and f"failures in {odd / 'out.failed.jsonl'}" in first.stderr
    # the decode error's one line, its path (brackets and all) shown as written
    assert f"{odd / 'notes.mp4'} · decord, pyav · no decoder could read it" in " ".join(first.stderr.split())
    shown = [line for line in first.stderr.splitlines() if line.startswith("  line ")]
    assert len(shown) == 5 and first.stderr.splitlines()[-1] == "  and 1 more"  # 6 failures
    assert [r["id"] for r in read_jsonl(out)] == ["ok"]
    assert len(read_jsonl(odd / "out.failed.jsonl")) == 6

    second = subprocess.run(run, env=env, capture_output=True, text=True)
    assert second.returncode == 1, second.stderr
    assert "1 already cached, 0 decoded, 0 failed, 1 known failures skipped" in second.stderr

    retried = subprocess.run([*run, "--retry-failed"], env=env, capture_output=True, text=True)
    assert retried.returncode == 1, retried.stderr
    assert "1 already cached, 0 decoded, 1 failed |" in retried.stderr

    ok_only = write_dataset(odd / "ok.jsonl", rows[:1])
    done = subprocess.run(
        [*reelrl, "preprocess", str(ok_only), "--max-frames", "4"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_an_unfinished_run_exits_3_and_writes_nothing(
    reelrl_home, video_dir, tmp_path, write_dataset, monkeypatch
):
    from rich.console import Console

    from services.preprocess import cli

    shown = Console(record=True, width=200)
    monkeypatch.setattr(cli, "console", shown)
    dataset = write_dataset(tmp_path / "in.jsonl", [{"id": "a", "videos": [str(video_dir / "short.mp4")]}])
    out = tmp_path / "out.jsonl"
    # No local workers and none running: the clip stays queued until the timeout.
    code = cli.preprocess_command(dataset, out, {"max_frames": 4}, workers=0, timeout=0.5)
    assert code == cli.ExitCode.unfinished == 3
    text = shown.export_text()
    assert "preprocess did not finish: 1 of 1 clips unfinished after 0.5 s" in text
    assert "nothing was written" in text and not out.exists()


def test_inconsistent_settings_exit_2(reelrl_home, video_dir, tmp_path, write_dataset, monkeypatch):
    from rich.console import Console

    from services.preprocess import cli

    shown = Console(record=True, width=200)
    monkeypatch.setattr(cli, "console", shown)
    monkeypatch.setenv("REELRL_TASK_TIME_LIMIT_S", "100")  # below the soft limit (600)
    reset_settings_cache()
    dataset = write_dataset(tmp_path / "in.jsonl", [{"id": "a", "videos": [str(video_dir / "short.mp4")]}])
    assert cli.preprocess_command(dataset, None, {}, workers=1, timeout=10) == cli.ExitCode.usage == 2
    assert "invalid settings: Value error, REELRL_TASK_TIME_LIMIT_S must exceed" in shown.export_text()
