"""The stack's images where no registry is reachable, built once per machine and kept under a content tag.

- the base: ``debootstrap --variant=minbase bookworm`` imported as an image;
- stand-ins for the official ``python``, ``postgres`` and ``redis`` images, from Debian's packages on that
  base (``standins/``), selected through the compose file's PYTHON_IMAGE, POSTGRES_IMAGE, REDIS_IMAGE;
- ``reelrl:cpu`` from ``deploy/docker/Dockerfile`` as a user builds it, given only what this network needs
  as build arguments: the machine's own wheel folders and local indexes (served on 127.0.0.1 to a
  ``--network host`` build, so the build reuses what the suite's environment came from) and the CA
  certificates that the network's TLS is signed with.

Each image's tag is a hash of what decides it. Each session's daemon is new, so the images are kept as
``docker save`` archives in the machine's cache (``~/.cache/reelrl/deploy``) and loaded from there.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import http.server
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from tests.deploy.stack.dockerd import ROOT, Docker, run

STANDINS = Path(__file__).parent / "standins"
SUITE = "bookworm"
# What reaches the ReelRL image's build context (.dockerignore) and so decides the image.
_REELRL_INPUTS = ("deploy/docker/Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "requirements",
                  "scripts/bootstrap.sh", "services", "examples")  # fmt: skip


def content_tag(*parts: str | bytes | Path) -> str:
    """16 hex digits of a hash over strings and files (folders: every file, by relative path)."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            files = sorted(p for p in part.rglob("*") if p.is_file()) if part.is_dir() else [part]
            for file in files:
                if "__pycache__" in file.parts:
                    continue
                digest.update(str(file.relative_to(ROOT)).encode() + b"\0" + file.read_bytes() + b"\0")
        else:
            digest.update((part.encode() if isinstance(part, str) else part) + b"\0")
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _cached(docker: Docker, cache: Path, image: str) -> Iterator[bool]:
    """Loads ``image`` from the machine's cache if it is there (yields True); otherwise the block builds
    it (yields False) and it is saved. One session at a time per image (a lock beside the archive)."""
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / (image.replace("/", "_").replace(":", "-") + ".tar")
    with open(archive.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.exists():
            docker("load", "-i", str(archive), timeout=900)
            yield True
            return
        yield False
        partial = archive.with_suffix(".partial")
        docker("save", "-o", str(partial), image, timeout=900)
        partial.rename(archive)
    _drop_older(archive)


def _drop_older(archive: Path) -> None:
    """Removes the archives of the same image under other tags (the reelrl image is 4 GB, and each code
    change makes a new tag), except those another session holds now."""
    repository = archive.name.rsplit("-", 1)[0]
    for other in archive.parent.glob(f"{repository}-*.tar"):
        if other == archive or other.name.rsplit("-", 1)[0] != repository:
            continue
        with open(other.with_suffix(".lock"), "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            other.unlink(missing_ok=True)
            other.with_suffix(".lock").unlink(missing_ok=True)


def base_image(docker: Docker, cache: Path) -> str:
    image = f"reelrl-test/debian:{SUITE}-minbase"
    with _cached(docker, cache, image) as loaded:
        if not loaded:
            with tempfile.TemporaryDirectory(dir=docker.home) as rootfs:
                run(
                    ["debootstrap", "--variant=minbase", SUITE, rootfs, "http://deb.debian.org/debian"],
                    timeout=900,
                )
                tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
                run(["docker", "import", "-", image], env=docker.env, timeout=600, stdin=tar.stdout)
                tar.stdout.close()
                if tar.wait() != 0:
                    raise RuntimeError(f"tar of the debootstrap tree {rootfs} failed")
    return image


def standin_image(docker: Docker, cache: Path, name: str, base: str) -> str:
    """``reelrl-test/NAME:TAG`` from ``standins/NAME.Dockerfile`` on ``base``."""
    dockerfile = STANDINS / f"{name}.Dockerfile"
    image = f"reelrl-test/{name}:{content_tag(base, STANDINS)}"
    with _cached(docker, cache, image) as loaded:
        if not loaded:
            build = ["build", "--network", "host", "--build-arg", f"BASE={base}", "-f", str(dockerfile)]
            docker(*build, "-t", image, str(STANDINS), timeout=900)
    return image


def _local_pip_sources() -> tuple[list[Path], list[Path]]:
    """The machine's own wheel folders (pip's find-links) and local indexes (file:// extra indexes)."""

    def values(key: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", key], capture_output=True, text=True, check=False
        )
        return done.stdout.split() if done.returncode == 0 else []

    folders = [*os.environ.get("PIP_FIND_LINKS", "").split(), *values("global.find-links")]
    indexes = [*os.environ.get("PIP_EXTRA_INDEX_URL", "").split(), *values("global.extra-index-url")]
    wheels = list(dict.fromkeys(Path(f) for f in folders if Path(f).is_dir()))
    local = [Path(i.removeprefix("file://")) for i in indexes if i.startswith("file://")]
    return wheels, list(dict.fromkeys(i for i in local if i.is_dir()))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Silent: pip's hundreds of requests would fill the test's output."""


@contextlib.contextmanager
def _served(folders: Iterable[Path], workdir: Path) -> Iterator[str]:
    """``folders`` over HTTP on 127.0.0.1 as ``URL/0/``, ``URL/1/``, …; yields URL."""
    top = Path(tempfile.mkdtemp(dir=workdir))
    for i, folder in enumerate(folders):
        (top / str(i)).symlink_to(folder)
    handler = functools.partial(_QuietHandler, directory=str(top))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _extra_ca_certs() -> str:
    """The CA certificates this machine adds to Debian's (update-ca-certificates' local folder)."""
    local = sorted(Path("/usr/local/share/ca-certificates").rglob("*.crt"))
    return "".join(p.read_text() for p in local)


def reelrl_image(docker: Docker, cache: Path, python_image: str) -> str:
    """``reelrl:TAG`` built from ``deploy/docker/Dockerfile`` on ``python_image`` with the classic builder."""
    image = f"reelrl:{content_tag(python_image, *(ROOT / p for p in _REELRL_INPUTS))}"
    with _cached(docker, cache, image) as loaded:
        if loaded:
            return image
        wheels, indexes = _local_pip_sources()
        with _served([*wheels, *(i.parent for i in indexes)], docker.home) as url:
            args = {"PYTHON_IMAGE": python_image, "EXTRA_CA_CERTS": _extra_ca_certs()}
            if wheels:
                args["PIP_FIND_LINKS"] = " ".join(f"{url}/{i}/" for i in range(len(wheels)))
            if indexes:
                served = (f"{url}/{len(wheels) + i}/{index.name}/" for i, index in enumerate(indexes))
                args["PIP_EXTRA_INDEX_URL"] = " ".join(served)
            argv = ["build", "--network", "host", "-f", "deploy/docker/Dockerfile", "-t", image]
            for name, value in args.items():
                argv += ["--build-arg", f"{name}={value}"]
            docker(*argv, ".", timeout=3600, cwd=ROOT)
    return image
