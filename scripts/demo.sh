#!/usr/bin/env bash
# Sets up .venv and runs spio's main job: `spio info`, then `spio bench --quick` (on a GPU: compile,
# select and run every kernel family next to PyTorch; with no GPU: compile every kernel with NVRTC,
# run the documented PyTorch fallbacks and say what a GPU adds).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh "bench,cu13"
spio info
spio bench --quick "$@"
