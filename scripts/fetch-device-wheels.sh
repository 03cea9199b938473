#!/usr/bin/env bash
# Before a GPU call on a machine with no network: download the pure-Python/manylinux wheels that
# the device image lacks (xgboost-cpu for the performance models, platformdirs) into .whl/
# (git-ignored; name it in the device call's `carry`). scripts/gpu-session.sh installs them.
# The versions are those of this checkout's .venv, so the host and the GPU run the same XGBoost.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
pins=()
for pkg in xgboost-cpu platformdirs; do
  version=$(python -m pip show "$pkg" 2>/dev/null | sed -n 's/^Version: //p')
  pins+=("$pkg${version:+==$version}")
done
mkdir -p .whl
python -m pip download -q --no-deps --only-binary=:all: --python-version "${PYVER:-3.12}" \
    --platform manylinux_2_28_x86_64 -d .whl "${pins[@]}"
ls -l .whl
