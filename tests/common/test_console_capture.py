"""third_party_to_log: the console keeps only the command's own words; C-level writes, child processes,
Python logging and warnings land in the log file, and --verbose leaves everything on the console."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import logging, os, subprocess, sys, warnings
    from pathlib import Path
    from services.common.console_capture import third_party_to_log

    logging.basicConfig(level=logging.WARNING)  # a handler on the real stderr, as libraries set up
    with third_party_to_log(Path(sys.argv[1]), verbose=sys.argv[2] == "1") as terminal:
        terminal.write("OWN LINE\\n")
        os.write(2, b"C-LEVEL NOISE\\n")
        print("STDOUT NOISE")
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('CHILD NOISE\\\\n')"], check=True)
        logging.getLogger("vllm.engine").info("LIBRARY INFO")
        warnings.warn("LIBRARY WARNING", DeprecationWarning)
    sys.stderr.write("AFTER\\n")
    """
)
NOISE = ("C-LEVEL NOISE", "STDOUT NOISE", "CHILD NOISE", "LIBRARY INFO", "LIBRARY WARNING")


def run(tmp_path: Path, verbose: bool) -> tuple[str, Path]:
    log = tmp_path / "run.log"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(log), "1" if verbose else "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr, log


def test_third_party_output_goes_to_the_log_and_the_console_keeps_its_own(tmp_path):
    console, log = run(tmp_path, verbose=False)
    assert "OWN LINE" in console and "AFTER" in console  # the terminal is back after the block
    for noise in NOISE:
        assert noise not in console
        assert noise in log.read_text()


def test_verbose_shows_everything_on_the_console(tmp_path):
    console, log = run(tmp_path, verbose=True)
    for line in ("OWN LINE", *NOISE):
        assert line in console
    assert not log.exists()


def test_a_failed_demo_names_the_log_that_holds_why(tmp_path, monkeypatch, capfd):
    """Without --verbose the console shows only the demo's own lines: when it fails, the log holding
    vLLM's, torch's and the workers' output is named there too, not only after a run that succeeded."""
    import services.demo as demo

    def broken(*args):
        raise RuntimeError("the engine core died")

    monkeypatch.setattr(demo, "_run_demo", broken)
    with pytest.raises(RuntimeError, match="engine core died"):
        demo.demo_command(tmp_path / "d", steps=1, workers=1, no_serve=True, port=0, videos=2)
    shown = capfd.readouterr().err.replace("\n", "")
    assert f"the demo stopped; vLLM, torch and worker output: {tmp_path / 'd' / 'demo.log'}" in shown
