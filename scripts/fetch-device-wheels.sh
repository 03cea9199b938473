#!/usr/bin/env bash
# Before a GPU call on a machine with no network: download the pure-Python/manylinux wheels that
# the device image lacks (xgboost-cpu for the performance models, platformdirs) into .whl/
# (git-ignored; name it in the device call's `carry`). scripts/gpu-session.sh installs them.
# The versions are those of this checkout's .venv (bash scripts/test.sh makes it), so the host
# and the GPU run the same XGBoost; PYVER is the device's Python (default 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  echo "fetch-device-wheels: no .venv here; run bash scripts/test.sh first" >&2
  exit 1
fi
pins=()
for pkg in xgboost-cpu platformdirs; do
  version=$(.venv/bin/python -m pip show "$pkg" 2>/dev/null | sed -n 's/^Version: //p' || true)
  if [ -z "$version" ]; then
    echo "fetch-device-wheels: $pkg is not installed in .venv; fetching the newest" >&2
  fi
  pins+=("$pkg${version:+==$version}")
done
mkdir -p .whl
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: \
    --python-version "${PYVER:-3.12}" --platform manylinux_2_28_x86_64 -d .whl "${pins[@]}"
ls -l .whl
