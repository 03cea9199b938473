"""spio.select's public surface, and an import that loads no heavy dependency: the ops import it
on their first call, before anything needs torch's kernels, numpy or XGBoost."""

from __future__ import annotations

import subprocess
import sys


def test_public_surface_is_explicit():
    import spio.select as s

    assert sorted(s.__all__) == sorted(set(s.__all__))
    assert all(hasattr(s, name) for name in s.__all__)
    assert {"Selector", "PickStore", "op_config", "default_selector", "kernel"} <= set(s.__all__)


def test_import_loads_no_torch_numpy_or_xgboost_and_no_driver():
    code = (
        "import sys; import spio.select;"
        "heavy = [m for m in ('torch', 'numpy', 'xgboost', 'filelock') if m in sys.modules];"
        "maps = open('/proc/self/maps').read();"
        "print(heavy, 'libcuda' in maps, 'libnvrtc' in maps)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] False False"
