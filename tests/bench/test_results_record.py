"""bench/results.py's guard on headline figures: a bench whose machine was busy at its start (load, or
another busy process) or at its end (another busy process) writes nothing unless ``--allow-load`` is
given, and then its load record says so; an idle run records its figures with both load readings."""

from __future__ import annotations

import json

import pytest

import bench.results as results

IDLE = {"at": "t0", "load1": 0.2, "load5": 0.2, "load15": 0.2, "cores": 2, "busy_processes": []}
LOADED = {**IDLE, "load1": 1.9}  # what ran just before the bench still weighs on the 1-minute average
OTHER = {**IDLE, "busy_processes": [{"pid": 7, "cpu_percent": 99.0, "command": "pytest tests"}]}


@pytest.fixture
def stored(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"kept": 1.0, "x_speedup": 2.0}))
    monkeypatch.setattr(results, "RESULTS", path)
    return path


def run_bench(monkeypatch, start, end, allow_load=False):
    readings = iter([start, end])
    monkeypatch.setattr(results, "machine_load", lambda *args, **kwargs: next(readings))
    watch = results.LoadWatch.begin("bench_x", allow_load)
    return results.record({"x_speedup": 3.0}, watch)


@pytest.mark.parametrize(("start", "end"), [(LOADED, IDLE), (OTHER, IDLE), (IDLE, OTHER)])
def test_a_busy_machine_records_nothing_without_allow_load(stored, monkeypatch, start, end):
    before = stored.read_text()
    with pytest.raises(
        results.BusyMachine, match=r"bench_x: not recorded, the machine was busy.*--allow-load"
    ):
        run_bench(monkeypatch, start, end)
    assert stored.read_text() == before


def test_allow_load_records_the_figures_marked(stored, monkeypatch):
    run_bench(monkeypatch, LOADED, IDLE, allow_load=True)
    data = json.loads(stored.read_text())
    assert data["x_speedup"] == 3.0 and data["kept"] == 1.0
    assert data["load/bench_x"] == {"start": LOADED, "end": IDLE, "allowed_under_load": True,
                                    "figures": ["x_speedup"]}  # fmt: skip


def test_an_idle_machine_records_the_figures_with_both_readings(stored, monkeypatch):
    end = {**IDLE, "at": "t1", "load1": 1.5}  # at the end the average holds the bench itself: not busy
    run_bench(monkeypatch, IDLE, end)
    data = json.loads(stored.read_text())
    assert data["x_speedup"] == 3.0
    assert data["load/bench_x"] == {"start": IDLE, "end": end, "allowed_under_load": False,
                                    "figures": ["x_speedup"]}  # fmt: skip
