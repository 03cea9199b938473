"""Config selection: which config a kernel family runs for a layer on a GPU, and the factory that
selects, compiles and loads it in one call.

Above `spio.kernels` (the families) and `spio.tune` (the performance models), below the ops:
`selector` is the policy (memory → autotune winner → persisted pick → model → heuristic),
`picks` the on-disk store it persists to, `basis` what a persisted pick is keyed by, `factory`
the one-call path. Importing it loads neither torch, numpy nor XGBoost, and selecting loads
neither numpy nor XGBoost (the models' trees are evaluated in plain Python, `spio.tune.trees`);
torch loads only when configs are measured.
"""

from spio.select.factory import Kernel, kernel
from spio.select.picks import PickStore
from spio.select.selector import TOP_K, Selector, default_selector, op_config

__all__ = ["TOP_K", "Kernel", "PickStore", "Selector", "default_selector", "kernel", "op_config"]
