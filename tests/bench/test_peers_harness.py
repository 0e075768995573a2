"""``python -m bench.peers`` end to end for 2 steps of ReelRL (image form) and of TRL (its side env built
once under the cache root and reused): every row is produced or carries its reason. No timing is
asserted (the figures of a 2-step run under a test suite's load mean nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)  # ~2 min alone (ReelRL's setup, TRL's); the first run also builds TRL's env
def test_two_steps_of_reelrl_and_trl_give_every_row(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "bench.peers", "--steps", "2", "--val-every", "2", "--frameworks", "reelrl-image,trl",
        "--warmup-steps", "0", "--val-limit", "4", "--no-record", "--allow-load",
        "--plot", str(tmp_path / "curves.png"), "--work", str(tmp_path / "work"),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=850)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    figures = json.loads((tmp_path / "work" / "figures.json").read_text())
    for key in ("reelrl", "trl"):
        assert figures[f"peer_{key}_reason"] is None, figures[f"peer_{key}_reason"]
        assert figures[f"peer_{key}_steps"] == 2
        assert f"peer_{key}_step_s" in figures and f"peer_{key}_heldout_accuracy" in figures
        # reached, or null with its reason: never a made-up number
        assert (figures[f"peer_{key}_minutes_to_09"] is None) != (
            figures[f"peer_{key}_minutes_to_09_reason"] is None
        )
    assert "peer_trl_step_time_ratio" in figures
    table = (tmp_path / "work" / "table.md").read_text().splitlines()
    assert len(table) == 2 + 2 and table[2].startswith("| ReelRL |") and table[3].startswith("| TRL 1.16.0")
    assert (tmp_path / "curves.png").stat().st_size > 0
