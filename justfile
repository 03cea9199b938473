# Developer tasks (https://github.com/casey/just). Each recipe is one command you can also type.

# host suite (what CI runs)
test:
    bash scripts/test.sh

# GPU suite on a GPU machine (builds in place, JUnit report)
test-gpu *ARGS:
    bash scripts/test-gpu.sh {{ARGS}}

# exhaustive sweeps (every config of every kernel)
test-slow:
    python -m pytest -q -n 2 -m slow tests

# the main job: spio info + quick benchmarks (or compile + fallbacks with no GPU)
demo:
    bash scripts/demo.sh

lint:
    ruff check spio tests benchmarks && ruff format --check spio tests benchmarks

# regenerate docs/env.md from spio/settings.py
env-docs:
    python -m spio.settings > docs/env.md

# line counts per subpackage (STYLE A2 soft limits: module 400, header 600, kernel 400)
sizes:
    find spio -name '*.py' -o -name '*.h' -o -name '*.cu' -o -name '*.pyx' | xargs wc -l | sort -n | tail -25
