"""CI's main run leaves out the tests the twin sessions just ran, by exact id (scripts/test.sh writes
them, tests/conftest.py reads them), and fails a twin test they did not run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest


class Item(SimpleNamespace):
    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


def items(*specs: tuple[str, tuple[str, ...]]) -> list[Item]:
    return [Item(nodeid=nodeid, markers=markers, stash=pytest.Stash()) for nodeid, markers in specs]


def test_only_the_exact_ids_that_ran_are_left_out_and_a_missed_twin_test_fails(
    tmp_path: Path, monkeypatch
) -> None:
    ran = tmp_path / "twin_ran.txt"
    ran.write_text("tests/a.py::test_x\ntests/a.py::test_p[1]\n")
    monkeypatch.setenv(conftest.TWIN_RAN, str(ran))
    collected = items(
        ("tests/a.py::test_x", ("twin",)),
        ("tests/a.py::test_x_slow", ()),  # pytest's --deselect tests/a.py::test_x would take this too
        ("tests/a.py::test_p[1]", ("twin",)),
        ("tests/a.py::test_p[10]", ()),
        ("tests/b.py::test_y", ("twin",)),  # a twin test the sessions did not run
    )
    deselected: list[Item] = []
    config = SimpleNamespace(hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)))
    conftest.leave_out_twins_that_ran(config, collected)  # type: ignore[arg-type]
    assert [i.nodeid for i in deselected] == ["tests/a.py::test_x", "tests/a.py::test_p[1]"]
    assert [i.nodeid for i in collected] == [
        "tests/a.py::test_x_slow",
        "tests/a.py::test_p[10]",
        "tests/b.py::test_y",
    ]
    missed = {i.nodeid: i.stash.get(conftest._MISSED_TWIN, None) for i in collected}
    assert missed["tests/a.py::test_x_slow"] is None and missed["tests/a.py::test_p[10]"] is None
    assert (
        "tests/b.py::test_y is marked twin but did not pass in both twin sessions"
        in missed["tests/b.py::test_y"]
    )
    with pytest.raises(pytest.fail.Exception, match="marked twin but did not pass"):
        conftest.pytest_runtest_setup(collected[2])  # type: ignore[arg-type]


def test_without_the_file_nothing_is_left_out(monkeypatch) -> None:
    monkeypatch.delenv(conftest.TWIN_RAN, raising=False)
    collected = items(("tests/a.py::test_x", ("twin",)))
    conftest.leave_out_twins_that_ran(SimpleNamespace(), collected)  # type: ignore[arg-type]
    assert [i.nodeid for i in collected] == ["tests/a.py::test_x"] and not collected[0].stash.get(
        conftest._MISSED_TWIN, None
    )
