"""The worker records behind `reelrl worker ping`: a worker's own node name, its record while it runs,
and records of workers that are gone (killed, or their pid now another process's) ignored and removed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from services.common.worker_nodes import local_workers, node_name, registered


def test_a_registered_worker_is_listed_under_its_own_name_until_it_ends(reelrl_home):
    assert local_workers() == []
    with registered("preprocess") as me:
        assert me.node == node_name("preprocess") == f"preprocess.{os.getpid()}@{socket.gethostname()}"
        assert [w.node for w in local_workers()] == [me.node]
        assert [w.node for w in local_workers("preprocess")] == [me.node]
        assert local_workers("eval") == []
        with registered("eval") as other:  # two roles in one process still have two names
            assert {w.node for w in local_workers()} == {me.node, other.node}
    assert local_workers() == [] and list((reelrl_home / "workers").iterdir()) == []


def test_records_of_dead_processes_and_reused_pids_are_ignored_and_removed(reelrl_home):
    folder = reelrl_home / "workers"
    with registered("train") as me:
        record = json.loads((folder / f"{me.node}.json").read_text())
    host = socket.gethostname()
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(gone.stdout)
    folder.mkdir(exist_ok=True)
    records = {
        "dead": {**record, "node": f"train.{dead_pid}@{host}", "pid": dead_pid},
        # This process is alive, but started long after the worker recorded under its pid.
        "reused": {**record, "node": f"train.{os.getpid()}@{host}", "started": record["started"] - 3600},
        "elsewhere": {**record, "node": "train.1@other-host", "host": "other-host", "pid": 1},
    }
    for name, data in records.items():
        (folder / f"{name}.json").write_text(json.dumps(data))
    (folder / "torn.json").write_text("{")  # being written: left alone
    assert local_workers() == []
    assert sorted(p.name for p in folder.iterdir()) == ["elsewhere.json", "torn.json"]


def test_malformed_records_are_ignored_not_a_crash(reelrl_home):
    """A hand-edited record (a pid that is text, negative or fractional, no start time) crashed every
    `reelrl worker ping` on the host with a traceback."""
    folder = reelrl_home / "workers"
    folder.mkdir(parents=True)
    host = socket.gethostname()
    good = {
        "node": f"train.{os.getpid()}@{host}",
        "role": "train",
        "host": host,
        "pid": os.getpid(),
        "started": 0.0,
    }
    for i, change in enumerate(
        [
            {"pid": "abc"},
            {"pid": -5},
            {"pid": 1.5},
            {"started": None},
            {"role": 7},
            {"extra": 1},
            {"pid": True},
        ]
    ):
        (folder / f"bad{i}.json").write_text(json.dumps({**good, **change}))
    (folder / "list.json").write_text("[1, 2]")
    with registered("eval") as me:
        assert [w.node for w in local_workers()] == [me.node]
