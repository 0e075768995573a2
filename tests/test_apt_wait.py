"""scripts/apt_get.sh, which scripts/test.sh uses to install Chromium: a lock held by another install
(apt's package lists and archive cache take theirs without waiting) is waited out, any other failure
returns at once. A stand-in apt-get on PATH fails as told and counts its calls."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCKED = "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)"


def run_apt_get(tmp_path: Path, failures: list[str], wait_s: int = 60) -> tuple[int, int, str]:
    """``apt_get update`` against a stand-in that prints and fails with ``failures`` in turn, then
    succeeds: (exit status, calls made, stderr)."""
    for i, message in enumerate(failures):
        (tmp_path / f"fail{i}").write_text(message)
    fake = tmp_path / "bin" / "apt-get"
    fake.parent.mkdir()
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'n=$(cat "{tmp_path}/calls" 2>/dev/null || echo 0); echo $((n + 1)) > "{tmp_path}/calls"\n'
        f'if [ -f "{tmp_path}/fail$n" ]; then cat "{tmp_path}/fail$n" >&2; exit 100; fi\n'
        'echo "Reading package lists... Done"\n'
    )
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "APT_RETRY_S": "0",
           "APT_WAIT_S": str(wait_s)}  # fmt: skip
    done = subprocess.run(
        ["bash", "-c", f"source {ROOT / 'scripts' / 'apt_get.sh'} && apt_get update"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return done.returncode, int((tmp_path / "calls").read_text()), done.stderr


def test_a_lock_held_by_another_install_is_waited_out(tmp_path: Path) -> None:
    status, calls, stderr = run_apt_get(tmp_path, [LOCKED, LOCKED])
    assert (status, calls) == (0, 3)
    assert stderr.count("another install holds apt's lock") == 2 and "Reading package lists" in stderr


def test_any_other_failure_returns_at_once(tmp_path: Path) -> None:
    status, calls, stderr = run_apt_get(tmp_path, ["E: Unable to locate package chromium"])
    assert (status, calls) == (100, 1)
    assert "Unable to locate package" in stderr and "another install" not in stderr


def test_the_wait_has_a_limit(tmp_path: Path) -> None:
    status, calls, _ = run_apt_get(tmp_path, [LOCKED] * 5, wait_s=0)
    assert (status, calls) == (100, 1)
