"""The order test files start in under pytest-xdist (tests/conftest.py): slow files first, the longest
recorded first and unrecorded ones after them, then the rest as collected."""

from __future__ import annotations

import json

from tests.conftest import DURATIONS_FILE, file_rank, shared_ids


def test_slow_files_start_longest_first_and_unrecorded_ones_after_them() -> None:
    files = ["a.py", "b.py", "c.py", "d.py", "e.py"]
    slow = {"b.py", "c.py", "d.py"}
    recorded = {"a.py": 900.0, "b.py": 30.0, "c.py": 400.0}
    ordered = sorted(files, key=lambda name: file_rank(name, slow, recorded))
    # c: 400 s; b: 30 s; d: slow, never recorded; then a and e as collected (a's 900 s is not slow)
    assert ordered == ["c.py", "b.py", "d.py", "a.py", "e.py"]


def test_the_recorded_durations_name_files_of_this_suite() -> None:
    recorded = json.loads(DURATIONS_FILE.read_text())
    assert recorded and all(isinstance(v, int | float) and v >= 0 for v in recorded.values())
    missing = [name for name in recorded if not (DURATIONS_FILE.parents[1] / name).exists()]
    assert not missing, f"tests/durations.json names files that are gone: {missing}"


def test_tests_sharing_an_id_are_named() -> None:
    assert shared_ids(["a.py::t", "a.py::u"]) is None
    message = shared_ids(["a.py::t", "b.py::t", "a.py::t"])
    assert message is not None and "['a.py::t']" in message and "xdist" in message
