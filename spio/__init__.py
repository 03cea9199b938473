"""spio: typed-dimension CUDA kernels for PyTorch, compiled at run time with NVRTC.

The public surface, loaded on first use (so `import spio` has no side effects and does not import
torch): the ops (`spio.conv2d_gw8`, `spio.layernorm_2d`, `spio.matmul`; also in
`spio.functional`), the layers (`spio.layers`), the generators (`Dim`, `Tensor`, `CompoundIndex`,
`generate`), `compile`, and the error types.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0.dev0"

_LAZY = {
    "conv2d_gw8": "spio.functional",
    "layernorm_2d": "spio.functional",
    "matmul": "spio.functional",
    "Dim": "spio.generators",
    "Tensor": "spio.generators",
    "CompoundIndex": "spio.generators",
    "generate": "spio.generators",
    "compile": "spio.compiler",
    "SpioError": "spio.errors",
    "CompileError": "spio.errors",
    "CudaDriverError": "spio.errors",
    "LibraryNotFoundError": "spio.errors",
    "OutOfResources": "spio.errors",
    "FallbackDisabledError": "spio.errors",
    "GeneratorError": "spio.errors",
    "NvrtcError": "spio.errors",
    "ModelFormatError": "spio.errors",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'spio' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
