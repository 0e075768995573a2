#!/usr/bin/env bash
# Prints the path of the project's virtual environment, building it first if needed.
#
# The ML stack is ~3.5 GB, so the environment lives outside the clone, keyed by a hash of everything
# that decides its contents (pins, lock file, this script): a fresh machine builds it from scratch, a
# later run with the same pins reuses it. The project itself is (re)installed editable on every call,
# so the environment always points at the clone that called it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
python=${REELRL_PYTHON:-python3.11}
key=$(cat pyproject.toml requirements/cpu-lock.txt scripts/bootstrap.sh | sha256sum | cut -c1-16)
venv=${REELRL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/reelrl/venv-$key}
log() { echo "[bootstrap] $*" >&2; }

if [ ! -f "$venv/.complete" ]; then
  log "building $venv (first run with these pins: a few minutes)"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip==26.3 setuptools==78.1.1 wheel >&2
  "$venv/bin/pip" install -q -c requirements/cpu-lock.txt -e ".[all,cpu,dev]" >&2
  # PyPI's Linux torchaudio/torchcodec are CUDA builds that cannot load beside a +cpu torch, and a
  # broken torchaudio breaks every transformers processor import; triton is unused on CPU.
  "$venv/bin/pip" uninstall -q -y torchaudio torchcodec triton >&2 || true
  touch "$venv/.complete"
fi

"$venv/bin/pip" install -q --no-deps --no-build-isolation -e . >&2
# vLLM spawns worker processes that never import our code, so the torchvision fix must be armed by
# the interpreter itself at start-up; the hook does nothing until torchvision is imported.
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import services.common.compat.torchvision_ops as _m; _m.install()" > "$site/zz_reelrl_compat.pth"
echo "$venv"
