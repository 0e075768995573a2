"""Whole-or-nothing text files with ordinary permissions (they were 0600, the temp file's mode: a
trainer running as another user could not read a preprocess job's output)."""

from __future__ import annotations

import os
import stat

import pytest

from services.common.atomic_files import atomic_text


def test_written_whole_with_the_umasks_permissions(tmp_path):
    target = tmp_path / "sub" / "out.jsonl"
    old = os.umask(0o027)
    try:
        with atomic_text(target) as fh:
            fh.write("a\n")
    finally:
        os.umask(old)
    assert target.read_text() == "a\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # 0666 & ~0027, as open() would make it
    assert [p.name for p in target.parent.iterdir()] == ["out.jsonl"]


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "out.jsonl"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_text(target) as fh:
        fh.write("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]
