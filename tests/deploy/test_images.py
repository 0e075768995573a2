"""The container images (deploy/docker/): what they run, what they copy, which pins they install."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "deploy" / "docker"
DOCKERFILES = [DOCKER / "Dockerfile", DOCKER / "Dockerfile.cuda"]


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for line in dockerfile.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = pending + stripped
        pending = ""
        keyword, _, arguments = text.partition(" ")
        result.append((keyword.upper(), arguments.strip()))
    assert not pending, f"{dockerfile}: ends inside a continued line"
    return result


def run_lines(arguments: str) -> list[str]:
    """The shell lines of a RUN/CMD/ENTRYPOINT (exec form: the argument vector as one line)."""
    if arguments.startswith("["):
        return [shlex.join(json.loads(arguments))]
    return [arguments]


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            found[re.sub(r"[-_.]+", "-", name).lower()] = version
    return found


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_command_the_image_runs_exists_in_the_cli(dockerfile, split_shell, check_command):
    checked = 0
    for keyword, arguments in instructions(dockerfile):
        if keyword not in ("RUN", "CMD", "ENTRYPOINT", "HEALTHCHECK"):
            continue
        for line in run_lines(arguments):
            for argv in split_shell(line):
                assert check_command(argv) == []
                checked += argv[0] in ("reelrl", "ray")
    assert checked >= 2  # the build's start-up check and the default command


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_is_multi_stage_and_runs_as_an_unprivileged_user(dockerfile):
    steps = instructions(dockerfile)
    stages = [args.split()[-1] for keyword, args in steps if keyword == "FROM"]
    assert stages == ["build", "runtime"]
    runtime = steps[max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM") :]
    users = [args for keyword, args in runtime if keyword == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert any(k == "COPY" and args.startswith("--from=build ") for k, args in runtime)
    # The user's home of the frame store and settings are the image's defaults.
    env = " ".join(args for keyword, args in runtime if keyword == "ENV")
    assert "REELRL_HOME=/var/lib/reelrl" in env and "REELRL_FRAME_ROOT=/var/lib/reelrl/frames" in env


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_settings_the_image_sets_are_real_settings(dockerfile, settings_fields):
    for keyword, arguments in instructions(dockerfile):
        if keyword == "ENV":
            for name in re.findall(r"(REELRL_[A-Z0-9_]+)=", arguments):
                assert name in settings_fields, f"{dockerfile.name}: {name} is not a setting"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_what_the_image_copies_exists_and_is_in_the_build_context(dockerfile):
    allowed = [
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    assert (ROOT / ".dockerignore").read_text().splitlines()[1] == "*"  # everything else stays out
    for keyword, arguments in instructions(dockerfile):
        if keyword != "COPY" or arguments.startswith("--from="):
            continue
        for source in arguments.split()[:-1]:
            path = source.rstrip("/")
            assert (ROOT / path).exists(), f"{dockerfile.name} copies {source}, which does not exist"
            assert any(path == a or path.startswith(a + "/") for a in allowed), (
                f"{dockerfile.name} copies {source}, which .dockerignore keeps out of the build context"
            )


def test_cpu_image_builds_its_environment_like_ci():
    """scripts/bootstrap.sh builds the environment, so the image has CI's lock file and fixes."""
    steps = instructions(DOCKER / "Dockerfile")
    copied = " ".join(args for keyword, args in steps if keyword == "COPY")
    assert "requirements/" in copied and "scripts/bootstrap.sh" in copied
    env = " ".join(args for keyword, args in steps if keyword == "ENV")
    build_args = " ".join(args for keyword, args in steps if keyword == "ARG")
    runs = [args for keyword, args in steps if keyword == "RUN"]
    assert any("REELRL_VENV=/opt/reelrl/venv bash scripts/bootstrap.sh" in run for run in runs)
    # The lock pins torch's +cpu build, which only PyTorch's CPU index serves (by default: a build
    # argument, so a network without it can name its own, tests/deploy/stack).
    assert "torch==" in (ROOT / "requirements" / "cpu-lock.txt").read_text()
    assert "PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu" in build_args
    assert "PIP_EXTRA_INDEX_URL=${PIP_EXTRA_INDEX_URL}" in env


def test_cuda_image_installs_the_gpu_extra_with_the_gpu_lock_and_ci_installers():
    runs = " ".join(args for keyword, args in instructions(DOCKER / "Dockerfile.cuda") if keyword == "RUN")
    assert '-c deploy/docker/gpu-lock.txt -e ".[all,gpu]"' in runs
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    installers = re.search(r"install --upgrade (pip==\S+ setuptools==\S+) wheel", bootstrap)
    assert installers, "scripts/bootstrap.sh no longer pins pip and setuptools the way this test reads"
    assert f"pip install {installers.group(1)} wheel" in runs


def test_gpu_lock_has_the_cpu_locks_versions_but_what_vllm_pins():
    header = (DOCKER / "gpu-lock.txt").read_text().splitlines()[:3]
    released = set(header[2].removeprefix("# released:").split())
    gpu, cpu = pins(DOCKER / "gpu-lock.txt"), pins(ROOT / "requirements" / "cpu-lock.txt")
    differ = {name for name in gpu.keys() & cpu.keys() if gpu[name] != cpu[name]}
    assert differ - {"torch"} == released
    assert cpu["torch"] == gpu["torch"] + "+cpu"  # the same torch, the CUDA build


# Each lock holds every extra of the project but the other platform's vLLM (and the image's lock no
# development tools): an extra added later is checked without editing this list.
LOCKS = {
    "gpu-lock.txt": (DOCKER / "gpu-lock.txt", {"cpu", "dev"}),
    "cpu-lock.txt": (ROOT / "requirements" / "cpu-lock.txt", {"gpu"}),
}


@pytest.mark.parametrize("lock", LOCKS)
def test_gpu_lock_holds_every_pin_of_the_project(lock):
    path, left_out = LOCKS[lock]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {"wandb", "mlflow"} <= extras.keys() - left_out  # the trackers' extras are among those checked
    wanted = list(project["dependencies"])
    for extra in extras.keys() - left_out:
        wanted += [req for req in extras[extra] if not req.startswith("reelrl[")]
    locked = pins(path)
    for requirement in wanted:
        name, _, version = requirement.partition("==")
        name = re.sub(r"\[.*\]", "", name)
        key = re.sub(r"[-_.]+", "-", name).lower()
        # ``==V`` admits a local build of V (the CPU lock's ``torch==V+cpu``), as pip reads it
        found = locked.get(key, "").split("+")[0]
        assert found == version, f"{requirement}: {lock} has {locked.get(key)} (regenerate the lock)"
