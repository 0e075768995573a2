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
# Only what decides the installed packages enters the key (not, say, the linter's settings).
pins=$("$python" -c 'import json, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(json.dumps([p.get("requires-python"), p["dependencies"], p.get("optional-dependencies")], sort_keys=True))')
key=$({ echo "$pins"; cat requirements/cpu-lock.txt scripts/bootstrap.sh; } | sha256sum | cut -c1-16)
venv=${REELRL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/reelrl/venv-$key}
log() { echo "[bootstrap] $*" >&2; }
# pip's output goes to a log beside the environment; it is shown only when a step fails.
quiet() { "$@" >>"$venv.log" 2>&1 || { tail -n 60 "$venv.log" >&2; log "FAILED: $* (full log: $venv.log)"; exit 1; }; }

mkdir -p "$(dirname "$venv")"
# One build at a time per environment (two checkouts may bootstrap at once).
exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
  log "building $venv (first run with these pins: a few minutes)"
  rm -rf "$venv" "$venv.log"
  quiet "$python" -m venv "$venv"
  quiet "$venv/bin/pip" install --upgrade pip==26.3 setuptools==78.1.1 wheel
  quiet "$venv/bin/pip" install -c requirements/cpu-lock.txt -e ".[all,cpu,dev]"
  # PyPI's Linux torchaudio/torchcodec are CUDA builds that cannot load beside a +cpu torch, and a
  # broken torchaudio breaks every transformers processor import; triton is unused on CPU.
  quiet "$venv/bin/pip" uninstall -y torchaudio torchcodec triton
  touch "$venv/.complete"
  log "ready"
fi

quiet "$venv/bin/pip" install --no-deps --no-build-isolation -e .
# vLLM spawns worker processes that never import our code, so the torchvision fix must be armed by
# the interpreter itself at start-up; the hook does nothing until torchvision is imported.
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import services.common.compat.torchvision_ops as _m; _m.install()" > "$site/zz_reelrl_compat.pth"
echo "$venv"
