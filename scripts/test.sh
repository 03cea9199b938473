#!/usr/bin/env bash
# Sets up .venv and runs the test suite. With no GPU the `gpu` tests skip (with their reason); on a
# GPU machine they run too. Exhaustive sweeps (`slow`) are left out; `-m slow` runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh "test,cu13"
python -m pytest -q -n "${SPIO_TEST_JOBS:-2}" -m "not slow" tests "$@"
