"""Engines of one fleet on vLLM's CPU backend each get their own cores: colocated shards split their host's
cores in rank order (services/rollout/colocated.py; every rank on Ray is local rank 0, so vLLM's own
`auto` binding gave two shards the same cores), and a disaggregated engine's actor pins itself and the
processes it starts to its share (``pin_here``; real engines: tests/rollout/test_fleet_ray.py)."""

from __future__ import annotations

from services.rollout.environment import core_share
from services.rollout.worker import engine_threads


def test_ranks_on_one_host_split_its_cores_in_rank_order():
    assert core_share([0, 1], 0, 2) == [0] and core_share([0, 1], 1, 2) == [1]
    assert core_share(range(8), 1, 4) == [2, 3]
    assert core_share([0, 1, 2], 1, 2) == [1]  # the odd core is left to the system


def test_one_rank_or_more_ranks_than_cores_share_everything():
    assert core_share([0, 1], 0, 1) == [0, 1]
    assert core_share([0, 1], 2, 3) == [0, 1]


PIN_SCRIPT = """
import json, os, subprocess, sys, threading
from services.rollout.environment import pin_here

os.sched_setaffinity(0, json.loads(sys.argv[1]))
waiting = threading.Event()
other = threading.Thread(target=waiting.wait, daemon=True)  # a thread that was there before (as Ray's own are)
other.start()
try:
    returned = pin_here(tuple(json.loads(sys.argv[2])))
except ValueError as exc:
    print(json.dumps({"error": str(exc)}))
    raise SystemExit(0)
child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                       capture_output=True, text=True, check=True)
seen = {"returned": returned, "thread": sorted(os.sched_getaffinity(0)),
        "other": sorted(os.sched_getaffinity(other.native_id)), "child": json.loads(child.stdout)}
waiting.set()
print(json.dumps(seen))
"""


def _pinned(cores: list[int], slot: tuple[int, int]) -> dict:
    """``pin_here(slot)`` in a process of its own restricted to ``cores``: what it returned, and the
    cores of its calling thread, of a thread that was already running and of a process it started."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", PIN_SCRIPT, json.dumps(cores), json.dumps(slot)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def test_a_pinned_engine_process_its_threads_and_the_processes_it_starts_keep_to_its_share():
    import os

    cores = sorted(os.sched_getaffinity(0))[:2]
    assert len(cores) == 2, "the machine has two cores"
    seen = _pinned(cores, (1, 2))
    # the actor's own threads, and vLLM's engine core and worker, which start this way
    assert seen == {"returned": [cores[1]], "thread": [cores[1]], "other": [cores[1]], "child": [cores[1]]}


def test_fewer_cores_than_engines_pin_nothing_and_a_slot_out_of_range_is_refused():
    import os

    one = sorted(os.sched_getaffinity(0))[:1]
    assert _pinned(one, (1, 2)) == {"returned": None, "thread": one, "other": one, "child": one}
    assert "does not exist" in _pinned(one, (2, 2))["error"]


def test_an_in_process_engine_in_an_actor_computes_with_its_cores():
    assert engine_threads([2, 3], (1, 2), cores=4) == 2  # pinned: its share
    assert engine_threads(None, (0, 3), cores=2) == 1  # 3 engines on 2 cores could not be pinned
    assert engine_threads(None, (0, 2), cores=8) == 4  # unpinned slot: its part, not every core
    assert engine_threads(None, None, cores=16) == 16  # alone: every core (Ray would give it 1)
    # generating beside the update (trainer.off_policy_steps: 1): its bundle's CPUs at most
    assert engine_threads(None, None, cores=2, cap=1) == 1
    assert engine_threads([2, 3], (1, 2), cores=4, cap=4) == 2
