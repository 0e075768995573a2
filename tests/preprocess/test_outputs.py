"""`reelrl preprocess` never replaces a file it did not write: OUT (and OUT.failed.jsonl beside it) must
be new, or what an earlier preprocess run wrote there and nobody changed since, unless --overwrite.
Through the real command, in its own process (embedded SQLite under the test's home)."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

TEXT_ROWS = [{"id": f"t{i}", "problem": "2+2?", "answer": "4"} for i in range(2)]  # no clip to decode


@pytest.fixture
def preprocess(reelrl_home):
    env = {**os.environ, "REELRL_HOME": str(reelrl_home)}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "services.cli", "preprocess", *args, "--workers", "0", "--timeout", "60"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    return run


def test_out_naming_a_video_or_a_model_file_is_refused_and_nothing_changes(
    preprocess, tmp_path, video_dir, write_dataset
):
    dataset = write_dataset(tmp_path / "train.jsonl", TEXT_ROWS)
    video = tmp_path / "videos" / "clip_a.mp4"
    video.parent.mkdir()
    video.write_bytes((video_dir / "short.mp4").read_bytes())
    config = tmp_path / "model" / "config.json"
    config.parent.mkdir()
    config.write_text('{"model_type": "qwen2_5_vl"}\n')
    for victim in (video, config):
        before = victim.read_bytes()
        done = preprocess(str(dataset), "--out", str(victim))
        assert done.returncode == 2, done.stderr
        text = " ".join(done.stderr.split())
        assert f"refused: {victim}: exists and was not written by a preprocess run" in text
        assert "--overwrite" in text and "Traceback" not in done.stderr
        assert victim.read_bytes() == before


def test_a_user_file_where_the_failures_would_go_is_refused(preprocess, tmp_path, write_dataset):
    dataset = write_dataset(tmp_path / "train.jsonl", TEXT_ROWS)
    mine = tmp_path / "out.failed.jsonl"  # the name the failures file would take
    mine.write_text("my notes\n")
    done = preprocess(str(dataset), "--out", str(tmp_path / "out.jsonl"))
    assert done.returncode == 2, done.stderr
    assert f"{mine}: exists and was not written" in " ".join(done.stderr.split())
    assert mine.read_text() == "my notes\n" and not (tmp_path / "out.jsonl").exists()


def test_reruns_replace_their_own_output_but_not_once_someone_edits_it(preprocess, tmp_path, write_dataset):
    dataset = write_dataset(tmp_path / "train.jsonl", TEXT_ROWS)
    out = tmp_path / "train.clips.jsonl"  # the default OUT
    first = preprocess(str(dataset))
    assert first.returncode == 0, first.stderr
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["t0", "t1"]
    again = preprocess(str(dataset))  # its own earlier output: replaced
    assert again.returncode == 0, again.stderr
    out.write_text(out.read_text() + '{"id": "added by hand"}\n')
    edited = preprocess(str(dataset))
    assert edited.returncode == 2, edited.stderr
    assert f"{out}: changed since a preprocess run wrote it" in " ".join(edited.stderr.split())
    assert "added by hand" in out.read_text()
    forced = preprocess(str(dataset), "--overwrite")
    assert forced.returncode == 0, forced.stderr
    assert "added by hand" not in out.read_text()
    assert preprocess(str(dataset)).returncode == 0  # recorded again by the forced run


def test_out_equal_to_the_dataset_is_refused_even_with_overwrite(preprocess, tmp_path, write_dataset):
    dataset = write_dataset(tmp_path / "train.jsonl", TEXT_ROWS)
    before = dataset.read_text()
    done = preprocess(str(dataset), "--out", str(dataset), "--overwrite")
    assert done.returncode == 2 and "is the dataset being read" in done.stderr
    assert dataset.read_text() == before


def test_rerunning_a_failures_file_into_its_own_out_is_refused(preprocess, tmp_path, write_dataset):
    """OUT.failed.jsonl as the DATASET of a run into OUT: the run would delete (or rewrite) its input.
    It was accepted and deleted it."""
    failures = write_dataset(tmp_path / "o.failed.jsonl", TEXT_ROWS)
    before = failures.read_text()
    for extra in ((), ("--overwrite",)):
        done = preprocess(str(failures), "--out", str(tmp_path / "o.jsonl"), *extra)
        assert done.returncode == 2, done.stderr
        assert f"{failures}: is the dataset being read" in " ".join(done.stderr.split())
        assert failures.read_text() == before
    link = tmp_path / "elsewhere.failed.jsonl"
    link.hardlink_to(failures)  # another name of the same bytes
    done = preprocess(str(failures), "--out", str(tmp_path / "elsewhere.jsonl"), "--overwrite")
    assert done.returncode == 2 and "is the dataset being read" in done.stderr
    assert failures.read_text() == before


def test_one_row_nested_too_deep_fails_alone(preprocess, tmp_path, write_dataset):
    """It failed the whole command with a RecursionError traceback and wrote nothing."""
    dataset = write_dataset(tmp_path / "train.jsonl", [TEXT_ROWS[0], "[" * 5000 + "]" * 5000, TEXT_ROWS[1]])
    done = preprocess(str(dataset), "--out", str(tmp_path / "out.jsonl"))
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "line 2: nested 5000 levels deep" in done.stderr
    assert [json.loads(line)["id"] for line in (tmp_path / "out.jsonl").read_text().splitlines()] == [
        "t0",
        "t1",
    ]
    (failed,) = [json.loads(line) for line in (tmp_path / "out.failed.jsonl").read_text().splitlines()]
    assert failed["error"] == "line 2: nested 5000 levels deep (at most 64)"


def test_one_row_with_a_lone_surrogate_fails_alone(preprocess, tmp_path, write_dataset):
    """It decoded everything, then failed writing the output (UnicodeEncodeError traceback, exit 1,
    nothing written)."""
    row = '{"id": "bad", "problem": "what \\ud800 happens?"}'
    dataset = write_dataset(tmp_path / "train.jsonl", [TEXT_ROWS[0], row, TEXT_ROWS[1]])
    done = preprocess(str(dataset), "--out", str(tmp_path / "out.jsonl"))
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "line 2: a string holds a lone surrogate" in done.stderr
    assert [json.loads(line)["id"] for line in (tmp_path / "out.jsonl").read_text().splitlines()] == [
        "t0",
        "t1",
    ]
    (failed,) = [json.loads(line) for line in (tmp_path / "out.failed.jsonl").read_text().splitlines()]
    assert failed["error"] == "line 2: a string holds a lone surrogate (U+D800): not text"


def test_outs_that_cannot_be_written_are_refused_before_any_work(preprocess, tmp_path, write_dataset):
    """A folder as --out with --overwrite failed after decoding (IsADirectoryError traceback); a name
    too long failed with a traceback and exit 1."""
    dataset = write_dataset(tmp_path / "train.jsonl", TEXT_ROWS)
    folder = tmp_path / "a-folder"
    folder.mkdir()
    for out, extra, why in (
        (folder, ("--overwrite",), "is a folder"),
        (tmp_path / f"{'a' * 300}.jsonl", (), "File name too long"),
        (tmp_path / f"{'a' * 300}.jsonl", ("--overwrite",), "File name too long"),
        (dataset / "x.jsonl", (), "is not a folder"),
    ):
        done = preprocess(str(dataset), "--out", str(out), *extra)
        assert done.returncode == 2, (out, done.stderr)
        assert "Traceback" not in done.stderr and why in " ".join(done.stderr.split()), done.stderr
    assert list(folder.iterdir()) == []


def test_a_folder_swapped_for_a_link_during_the_run_writes_nothing(
    reelrl_home, tmp_path, write_dataset, monkeypatch
):
    """OUT's folder replaced by a link to another place while the clips decoded: the output was written
    there, outside every check (and, for a job, outside the data roots)."""
    from services.common.frames import VideoParams
    from services.common.outputs import OutputTaken
    from services.preprocess import dispatch

    dataset = write_dataset(tmp_path / "train.jsonl", TEXT_ROWS)
    (tmp_path / "tt").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    original = dispatch._wait_all

    def swap_then_wait(*args, **kwargs):
        (tmp_path / "tt").rename(tmp_path / "tt.real")
        (tmp_path / "tt").symlink_to(elsewhere)
        return original(*args, **kwargs)

    monkeypatch.setattr(dispatch, "_wait_all", swap_then_wait)
    with pytest.raises(OutputTaken, match="now resolves to"):
        dispatch.run_preprocess(dataset, tmp_path / "tt" / "o.jsonl", VideoParams(), workers=0)
    assert list(elsewhere.iterdir()) == [] and list((tmp_path / "tt.real").iterdir()) == []
