#!/usr/bin/env bash
# Download the wheels bench/gpu/wheels.txt names, at requirements/cpu-lock.txt's versions, for the
# device machine's Python (3.12, x86-64 manylinux) into DIR (default .whl, which git ignores). The device
# then needs no network: `WHEELS=.whl bench/gpu/run.sh` installs them into a temp folder of its own.
# A package published only as a source archive (rouge-score) is built into a wheel here.
#   bench/gpu/wheels.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${1:-.whl}
PY=${PYTHON:-python3}
mkdir -p "$DIR"
rm -f "$DIR"/*.whl  # two versions of one package would stop the device's install
platforms=()
for tag in manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 \
           manylinux_2_17 manylinux2014 manylinux1; do
  platforms+=(--platform "${tag}_x86_64")
done
while read -r name; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  key=$(echo "$name" | tr 'A-Z_' 'a-z-')
  pin=$(tr 'A-Z_' 'a-z-' < requirements/cpu-lock.txt | grep -n "^$key==" | cut -d: -f1 || true)
  [[ -n "$pin" ]] || { echo "wheels.sh: $name is not pinned in requirements/cpu-lock.txt" >&2; exit 1; }
  requirement=$(sed -n "${pin}p" requirements/cpu-lock.txt)
  if ! "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      "${platforms[@]}" -d "$DIR" "$requirement" 2>"$DIR/.download.log"; then
    # a source-only release: built here, which is right only for a pure-Python package
    built=$(mktemp -d)
    "$PY" -m pip wheel -q --no-deps -w "$built" "$requirement"
    if ! ls "$built"/*-py3-none-any.whl >/dev/null 2>&1; then
      cat "$DIR/.download.log" >&2
      echo "wheels.sh: $requirement has no wheel for the device and builds only for this machine" >&2
      exit 1
    fi
    mv "$built"/*.whl "$DIR"/ && rm -rf "$built"
  fi
done < bench/gpu/wheels.txt
rm -f "$DIR/.download.log"
du -sh "$DIR"
