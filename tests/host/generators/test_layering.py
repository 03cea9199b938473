"""spio.generators stays below torch and has no import-time side effects."""

import subprocess
import sys


def test_generators_do_not_import_torch():
    code = (
        "import sys, spio.generators, spio.generators.blocks; "
        "from spio.generators import *; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_public_surface_is_explicit():
    import spio.generators as g

    assert sorted(g.__all__) == sorted(set(g.__all__))
    assert all(hasattr(g, name) for name in g.__all__)
    assert "generate" in g.__all__ and "Dim" in g.__all__ and "Tensor" in g.__all__
