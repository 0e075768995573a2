"""Outputs never overwrite inputs: only a new path, or a file the same kind of run wrote and nobody
changed since, may be written (services/common/outputs.py)."""

import re

import pytest

from services.common.outputs import (
    OutputTaken,
    check_output_file,
    forget_output_file,
    record_output_file,
)


def test_a_new_path_is_free(reelrl_home, tmp_path):
    check_output_file(tmp_path / "new.jsonl", "preprocess")


def test_an_existing_file_no_run_wrote_is_refused_naming_it(reelrl_home, tmp_path):
    video = tmp_path / "clip.mp4"
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42")
    with pytest.raises(OutputTaken, match="was not written by a preprocess run") as err:
        check_output_file(video, "preprocess", hint="Choose another.")
    assert str(video) in str(err.value) and "Choose another." in str(err.value)
    assert err.value.path == video


def test_a_recorded_output_may_be_replaced_until_someone_changes_it(reelrl_home, tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a"}\n')
    record_output_file(out, "preprocess", job_id="0" * 32)
    check_output_file(out, "preprocess")
    with pytest.raises(OutputTaken, match="written by a preprocess run, not a eval run"):
        check_output_file(out, "eval")
    out.write_text('{"id": "a", "note": "edited by hand"}\n')  # the user's now
    with pytest.raises(OutputTaken, match="changed since a preprocess run wrote it"):
        check_output_file(out, "preprocess")
    record_output_file(out, "preprocess")  # a run that was told to overwrite it
    check_output_file(out, "preprocess")
    forget_output_file(out)
    with pytest.raises(OutputTaken, match="was not written"):
        check_output_file(out, "preprocess")


def test_folders_and_links_are_never_outputs(reelrl_home, tmp_path):
    (tmp_path / "folder").mkdir()
    target = tmp_path / "target.jsonl"
    target.write_text("{}\n")
    record_output_file(target, "preprocess")
    (tmp_path / "link.jsonl").symlink_to(target)
    (tmp_path / "dangling.jsonl").symlink_to(tmp_path / "nowhere")
    for path in ("folder", "link.jsonl", "dangling.jsonl"):
        with pytest.raises(OutputTaken, match="not a regular file"):
            check_output_file(tmp_path / path, "preprocess")


def test_a_run_folder_is_new_empty_or_marked(tmp_path):
    from services.common.outputs import check_run_folder

    check_run_folder(tmp_path / "absent", ".lock", "training")
    check_run_folder(tmp_path, ".lock", "training")  # empty
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(
        OutputTaken, match=re.escape("holds files and is not a training run's folder (no .lock)")
    ):
        check_run_folder(tmp_path, ".lock", "training")
    (tmp_path / ".lock").touch()
    check_run_folder(tmp_path, ".lock", "training")
    with pytest.raises(OutputTaken, match="exists and is not a folder"):
        check_run_folder(tmp_path / "notes.txt", ".lock", "training")
    (tmp_path / "link").symlink_to(tmp_path)  # a link to a run's folder (kept on another disk) is it
    check_run_folder(tmp_path / "link", ".lock", "training")
    (tmp_path / "file-link").symlink_to(tmp_path / "notes.txt")
    with pytest.raises(OutputTaken, match="exists and is not a folder"):
        check_run_folder(tmp_path / "file-link", ".lock", "training")
