#!/usr/bin/env bash
# Creates .venv (seeing the system's packages, so a preinstalled CUDA torch is reused) and installs
# spio in place with the given extras. Sourced by scripts/test.sh and scripts/demo.sh.
#   SPIO_TORCH_SPEC  pip spec used when torch is missing (default: torch==2.13.0)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extras="${1:-test}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv --system-site-packages .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
if ! python -c "import torch" 2>/dev/null; then
  # No torch yet: install it first, so spio's `torch` requirement is already met.
  python -m pip install -q "${SPIO_TORCH_SPEC:-torch==2.13.0}"
fi
python -m pip install -q -e ".[${extras}]"
