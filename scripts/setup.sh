#!/usr/bin/env bash
# Creates .venv (seeing the system's packages, so a preinstalled CUDA torch is reused) and installs
# spio in place with the given extras. Sourced by scripts/test.sh and scripts/demo.sh.
#
# torch, when the venv cannot import one (it says which it installs, and why):
#   - SPIO_TORCH_SPEC set: exactly that pip spec (e.g. torch==2.13.0 for PyPI's CUDA build).
#   - a GPU here (nvidia-smi lists one): torch==2.13.0 from PyPI, the CUDA build (several GB).
#   - no GPU: the CPU build, torch==2.13.0+cpu (about 200 MB): from a wheel pip finds without the
#     network (its find-links or a local index, as on CI machines) if there is one, else from
#     PyTorch's CPU index (https://download.pytorch.org/whl/cpu). If that index is unreachable it
#     stops and says how to choose another torch; it never falls back to the CUDA build on its own.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extras="${1:-test}"
TORCH_VERSION=2.13.0
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
if [ ! -x .venv/bin/python ]; then
  python3 -m venv --system-site-packages .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip

has_gpu() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

install_torch() {
  local cpu="torch==${TORCH_VERSION}+cpu"
  if [ -n "${SPIO_TORCH_SPEC:-}" ]; then
    echo "setup: installing ${SPIO_TORCH_SPEC} (SPIO_TORCH_SPEC)"
    python -m pip install -q "${SPIO_TORCH_SPEC}"
  elif has_gpu; then
    echo "setup: a GPU is here: installing torch==${TORCH_VERSION} from PyPI (the CUDA build)"
    python -m pip install -q "torch==${TORCH_VERSION}"
  elif python -m pip install -q --dry-run --no-index --no-deps "$cpu" >/dev/null 2>&1; then
    echo "setup: no GPU here: installing $cpu (the CPU build), from a wheel pip finds locally"
    python -m pip install -q "$cpu"
  else
    echo "setup: no GPU here: installing $cpu (the CPU build, ~200 MB) from $TORCH_CPU_INDEX"
    if ! python -m pip install -q "$cpu" --extra-index-url "$TORCH_CPU_INDEX"; then
      echo "setup: could not install $cpu from $TORCH_CPU_INDEX. Install a torch into .venv" \
           "first, or set SPIO_TORCH_SPEC, e.g. SPIO_TORCH_SPEC=torch==${TORCH_VERSION}" \
           "(PyPI's CUDA build, several GB)" >&2
      exit 1
    fi
  fi
}

if python -c "import torch" 2>/dev/null; then
  python -c "import torch; print(f'setup: reusing torch {torch.__version__} at '
             f'{torch.__path__[0]} (CUDA {torch.version.cuda or \"none: CPU build\"})')"
else
  # Installed first, so that spio's `torch` requirement is already met.
  install_torch
fi
python -m pip install -q -e ".[${extras}]"
