"""``bench/results.json``: the latest figure of every benchmark, key → number, and beside them the
machine's load while each bench ran (``load/<bench>``).

A figure taken while other work shared the cores is not a figure: a bench takes a :class:`LoadWatch`
when it starts and hands it to :func:`record` at the end. When the machine was busy at either end,
``record`` refuses to overwrite the figures unless the bench was run with ``--allow-load``; the load
record then says ``"allowed_under_load": true`` so docs/benchmarks.md can mark the figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

RESULTS = Path(__file__).with_name("results.json")
#: 1-minute load average above which a 2-core machine counts as busy before a bench starts (a machine
#: of other size scales it by its cores: the GPU script's 16-core device machine allows 5.6)
BUSY_LOAD = 0.7
#: another process using more than this share of one core (sampled over a second) is busy
BUSY_CPU_PERCENT = 20.0


class BusyMachine(RuntimeError):
    """The machine was busy while the bench ran and ``--allow-load`` was not given."""


def _own_tree() -> set[int]:
    me = psutil.Process()
    try:
        return {me.pid, *(p.pid for p in me.children(recursive=True))}
    except psutil.Error:
        return {me.pid}


def machine_load(sample_s: float = 1.0) -> dict[str, Any]:
    """The load averages and the processes outside this bench that used > 20 % of a core over
    ``sample_s`` seconds (name, pid, percent): what else shared the machine."""
    own = _own_tree()
    procs = [p for p in psutil.process_iter(["name", "cmdline"]) if p.pid not in own]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.cpu_percent(None)  # the first call starts the sample
    time.sleep(sample_s)
    busy = []
    for p in procs:
        try:
            percent = p.cpu_percent(None)
        except psutil.Error:
            continue
        if percent > BUSY_CPU_PERCENT:
            command = " ".join(p.info.get("cmdline") or [p.info.get("name") or "?"])[:120]
            busy.append({"pid": p.pid, "cpu_percent": round(percent, 1), "command": command})
    load1, load5, load15 = os.getloadavg()
    return {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load1": round(load1, 2),
        "load5": round(load5, 2),
        "load15": round(load15, 2),
        "cores": len(os.sched_getaffinity(0)),  # the cores this process may use, not the host's
        "busy_processes": sorted(busy, key=lambda b: -b["cpu_percent"]),
    }


def is_busy(load: dict[str, Any], *, at_start: bool) -> bool:
    # At the start the 1-minute average still carries what ran just before; at the end it includes the
    # bench itself, so only other processes count there.
    if load["busy_processes"]:
        return True
    return at_start and load["load1"] > BUSY_LOAD * (load.get("cores") or 2) / 2


def add_load_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-load",
        action="store_true",
        help="record the figures even though other work shared the machine (they are marked as such)",
    )


@dataclass
class LoadWatch:
    """The machine's load at a bench's start; :func:`record` takes the end and judges both."""

    bench: str
    allow_load: bool = False
    start: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def begin(cls, bench: str, allow_load: bool = False) -> LoadWatch:
        watch = cls(bench, allow_load, machine_load())
        if is_busy(watch.start, at_start=True):
            print(f"[{bench}] the machine is busy at the start: {describe(watch.start)}", flush=True)
            if not allow_load:
                print(
                    f"[{bench}] its figures will not be recorded (--allow-load records them, marked)",
                    flush=True,
                )
        return watch


def describe(load: dict[str, Any]) -> str:
    others = ", ".join(
        f"{b['command'].split()[0]}({b['pid']}) {b['cpu_percent']}%" for b in load["busy_processes"][:5]
    )
    return f"load {load['load1']}/{load['load5']}/{load['load15']}" + (f"; busy: {others}" if others else "")


def record(figures: dict[str, float], watch: LoadWatch) -> dict[str, Any]:
    """Merge ``figures`` and the bench's load record into results.json (atomic replace, other keys
    kept) and return the whole map. Raises :class:`BusyMachine`, writing nothing, when the machine was
    busy at the bench's start or end and ``--allow-load`` was not given."""
    end = machine_load()
    busy = is_busy(watch.start, at_start=True) or is_busy(end, at_start=False)
    if busy and not watch.allow_load:
        raise BusyMachine(
            f"{watch.bench}: not recorded, the machine was busy (start: {describe(watch.start)}; end: "
            f"{describe(end)}). Rerun on an idle machine, or pass --allow-load to record them marked."
        )
    current = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    current.update(figures)
    current[f"load/{watch.bench}"] = {
        "start": watch.start,
        "end": end,
        "allowed_under_load": busy,
        "figures": sorted(figures),
    }
    write_atomic(RESULTS, current)
    return current


def write_atomic(path: Path, data: dict[str, Any]) -> None:
    """``data`` as JSON (keys sorted) to ``path`` through a temp file and a rename: a reader sees the
    old file or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(dict(sorted(data.items())), fh, indent=2)
        fh.write("\n")
    os.replace(tmp, path)
