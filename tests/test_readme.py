"""The README's jobs walkthrough, run as written: its code block goes to bash in a fresh folder on
the sample data (``reelrl make-sample-data`` from "Using it"), with real processes (the API, the
preprocess, eval and train workers, vLLM on CPU) on embedded defaults. Only the port changes (8000
may be taken on a test machine): REELRL_API_PORT for the server, and the URLs the block names.
Every job it submits must succeed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.api.stack import free_port

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.integration]

README = Path(__file__).resolve().parents[1] / "README.md"


def bash_blocks(section: str) -> list[str]:
    """The ```bash blocks of the README section titled ``section`` (up to the next heading)."""
    text = README.read_text(encoding="utf-8")
    start = text.index(section)
    following = re.search(r"\n#{2,3} ", text[start + len(section) :])
    body = text[start : start + len(section) + (following.start() if following else len(text))]
    return re.findall(r"```bash\n(.*?)```", body, flags=re.S)


def test_the_blocks_are_found():
    (jobs,) = bash_blocks("### Jobs API and status page")
    assert "reelrl submit preprocess job.yaml" in jobs and "reelrl submit eval" in jobs
    assert "reelrl submit train" in jobs and "reelrl worker train" in jobs and "REELRL_API_URL" in jobs
    (using,) = bash_blocks("## Using it")
    assert "reelrl make-sample-data reelrl-data" in using


def test_readme_jobs_walkthrough_runs_as_written(tmp_path):
    (using,) = bash_blocks("## Using it")
    (jobs,) = bash_blocks("### Jobs API and status page")
    sample = next(line for line in using.splitlines() if line.startswith("reelrl make-sample-data"))
    port = free_port()
    script = "set -euo pipefail\n" + sample.split("#")[0] + "\n" + jobs.replace(":8000", f":{port}")
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(README.parent / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REELRL_") or k.startswith("REELRL_TEST_")}
    env |= {
        "REELRL_API_PORT": str(port),  # what `reelrl serve api` binds without --port
        "REELRL_HOME": str(tmp_path / "home"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONWARNINGS": "ignore:You're running the worker with superuser privileges",
    }
    log = tmp_path / "walkthrough.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(
            ["bash", "-c", script], cwd=work, env=env, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        proc.wait(timeout=1500)
        output = log.read_text(errors="replace")
        assert proc.returncode == 0, output[-6000:]
        jobs_now = httpx.get(f"http://127.0.0.1:{port}/v1/jobs", timeout=30).json()
        states = sorted((j["kind"], j["state"]) for j in jobs_now["items"])
        assert states == [("eval", "succeeded"), ("preprocess", "succeeded"), ("train", "succeeded")], output
        train = next(j for j in jobs_now["items"] if j["kind"] == "train")
        assert train["result"]["steps"] == 3 and train["result"]["checkpoint"], train["result"]
        assert (work / "reelrl-data" / "train.clips.jsonl").is_file()
        assert re.search(r"preprocess\s+succeeded", output) and re.search(r"train\s+succeeded", output)
    finally:
        stop_group(proc.pid)


def stop_group(pgid: int, grace_s: float = 30) -> None:
    """The walkthrough leaves the API and the workers running in the background: SIGTERM them all,
    then SIGKILL what is left after ``grace_s``."""
    import time

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.5)


def _command_lines(path: Path) -> list[str]:
    """Every ``reelrl …`` invocation in the bash blocks of ``path`` (continuations joined, comments and
    heredoc bodies dropped)."""
    import shlex

    found = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S):
        block = re.sub(r"<<'EOF'\n.*?\nEOF\n", "\n", block, flags=re.S).replace("\\\n", " ")
        for line in block.splitlines():
            for segment in re.split(r"&&|;|\||&", line.split(" #")[0]):
                try:
                    words = shlex.split(segment)
                except ValueError:
                    continue
                if words[:1] == ["reelrl"]:
                    found.append(words)
    return found


@pytest.mark.parametrize("doc", ["README.md", "docs/operations.md"])
def test_every_reelrl_command_in_the_docs_exists_with_its_options_and_files(doc):
    import typer

    from services.cli import app

    root = typer.main.get_command(app)
    lines = _command_lines(README.parent / doc)
    assert len(lines) >= 8, lines
    for words in lines:
        command, rest = root, words[1:]
        while hasattr(command, "commands") and rest and rest[0] in command.commands:  # a group
            command, rest = command.commands[rest[0]], rest[1:]
        assert not hasattr(command, "commands"), f"{doc}: {' '.join(words)}: no such command"
        options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
        for word in rest:
            if word.startswith("-"):
                assert word.split("=")[0] in options, f"{doc}: {' '.join(words)}: no option {word}"
            elif word.startswith("examples/"):
                assert (README.parent / word).is_file(), f"{doc}: {' '.join(words)}: no file {word}"


def test_readme_and_operations_give_the_same_defaults():
    def rows(path: Path) -> dict[str, str]:
        cells = [
            line.split("|")
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.startswith("| `")
        ]
        return {c[1].strip(): c[2].strip() for c in cells if len(c) > 3}

    readme, operations = rows(README), rows(README.parent / "docs" / "operations.md")
    shared = set(readme) & set(operations)
    assert "`REELRL_DATA_ROOTS`" in shared
    for name in shared:
        assert readme[name] == operations[name], name
