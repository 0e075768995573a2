"""A peer's side environment: a venv that holds only the peer and the light packages it needs (pinned in
a lock file here), and reuses the product venv's heavy ones (torch, vLLM, transformers) through a
``.pth`` file. That file calls ``site.addsitedir`` on the product venv's site-packages, which appends it
after the side venv's own (a side pin wins where both hold a package; no second torch is ever
installed) and runs the product venv's own ``.pth`` hooks, among them the one that lets its torchvision
import beside the CPU torch (services/common/compat/torchvision_ops.py) and the editable install of this
clone (so a driver run with the side python imports ``services``).

The venvs live beside the product venv's default home, ``${XDG_CACHE_HOME:-~/.cache}/reelrl/peers/``
(``scripts/bootstrap.sh`` keeps ``venv-<key>`` there), so a fresh clone or a CI run finds them built.
Each is named after the hash of the lock file, the product venv's path and this module, so it is built
once and reused until either changes, as the product venv is. A build that did not finish leaves no
``.ready`` marker and is rebuilt; builds of one env take a file lock, so two test sessions starting at
once build it once.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

READY = ".ready"
#: the product venv a side env was built over (its site-packages path), written beside READY
PRODUCT = ".product"


class SideEnvError(RuntimeError):
    """The side environment could not be built (the message holds pip's or venv's own words)."""


def side_env_home() -> Path:
    """Where side venvs live: the same cache root ``scripts/bootstrap.sh`` gives the product venv."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "reelrl" / "peers"


def env_key(lock: Path, product_site: str) -> str:
    # this module's text too: a change to how the env is laid out rebuilds it
    digest = hashlib.sha256(
        lock.read_bytes() + b"\0" + product_site.encode() + b"\0" + Path(__file__).read_bytes()
    )
    return digest.hexdigest()[:16]


def pins(lock: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in lock.read_text().splitlines())
    found = [line for line in lines if line]
    unpinned = [line for line in found if "==" not in line]
    if unpinned:
        raise SideEnvError(f"{lock}: every package must be pinned with ==, not {unpinned}")
    return found


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-15:]
        raise SideEnvError(f"{what} failed (exit {done.returncode}):\n" + "\n".join(tail))


def _remove_stale(home: Path, name: str, keep: Path, product_site: str) -> None:
    """Earlier pins' envs over the same product venv: only the current one is kept on disk. Envs over
    another product venv (another clone's pins) are that clone's, and stay."""
    for stale in home.glob(f"{name}-*"):
        marker = stale / PRODUCT
        if stale != keep and stale.is_dir() and marker.exists() and marker.read_text() == product_site:
            shutil.rmtree(stale, ignore_errors=True)
            stale.with_name(f"{stale.name}.lock").unlink(missing_ok=True)


def side_python(name: str, lock: Path) -> Path:
    """The side venv's python for the peer ``name``, built from ``lock`` if it is not there yet."""
    product_site = sysconfig.get_paths()["purelib"]
    home = side_env_home()
    root = home / f"{name}-{env_key(lock, product_site)}"
    python = root / "bin" / "python"
    if (root / READY).exists():
        return python
    requirements = pins(lock)
    home.mkdir(parents=True, exist_ok=True)
    with (home / f"{root.name}.lock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # released when the file closes
        if (root / READY).exists():  # another process built it while this one waited
            return python
        shutil.rmtree(root, ignore_errors=True)  # a build that did not finish
        print(f"[side-env] building {root} from {lock.name} ({len(requirements)} pins) ...", flush=True)
        _run([sys.executable, "-m", "venv", str(root)], "python -m venv")
        site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        # "zz": read after the side venv's other .pth files; a plain path line would skip the product's hooks
        (Path(site) / "zz_product_venv.pth").write_text(f"import site; site.addsitedir({product_site!r})\n")
        _run(
            [str(python), "-m", "pip", "install", "--quiet", "--no-deps", *requirements],
            f"pip install --no-deps ({' '.join(requirements)})",
        )
        (root / PRODUCT).write_text(product_site)
        (root / READY).write_text("\n".join(requirements) + "\n")
        _remove_stale(home, name, root, product_site)
    return python
