#!/usr/bin/env bash
# GPU machine with no network: build spio in place against the Python that already holds a CUDA
# torch, then run the GPU suite and write a JUnit report.
#   scripts/test-gpu.sh [pytest args...]      e.g. scripts/test-gpu.sh -k conv2d
#   SPIO_WHEELS=DIR   install missing pure dependencies (platformdirs, xgboost-cpu) from wheels in DIR
#   SPIO_JUNIT=PATH   where the JUnit XML goes (default: test-gpu.xml)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ -n "${SPIO_WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-cache-dir --find-links "$SPIO_WHEELS" \
      "$SPIO_WHEELS"/*.whl
fi
"$PY" -m pip install -q -e . --no-build-isolation --no-deps
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible to torch'"
"$PY" -m pytest -q -m "gpu and not slow" -p no:cacheprovider --junitxml="${SPIO_JUNIT:-test-gpu.xml}" tests "$@"
