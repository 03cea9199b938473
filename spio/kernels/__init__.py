"""Kernel families: params, configs, specs and launches, and the registry that lists them."""

from spio.kernels import layernorm_2d
from spio.kernels import matmul as _matmul
from spio.kernels.conv2d_gw8 import fprop as _conv2d_gw8_fprop
from spio.kernels.conv2d_gw8 import wgrad as _conv2d_gw8_wgrad
from spio.kernels.conv2d_gw8 import wgrad_reduce as _conv2d_gw8_wgrad_reduce
from spio.kernels.kernel_def import KernelDef, KernelSpec, KernelStats

# Registry of every kernel family, written out (no discovery by import side effect).
KERNELS: dict[str, KernelDef] = {
    "matmul": _matmul.DEF,
    "layernorm_2d_fwd": layernorm_2d.FWD,
    "layernorm_2d_bwd": layernorm_2d.BWD,
    "layernorm_2d_bwd_reduce": layernorm_2d.BWD_REDUCE,
    "conv2d_gw8_fprop": _conv2d_gw8_fprop.FPROP,
    "conv2d_gw8_dgrad": _conv2d_gw8_fprop.DGRAD,
    "conv2d_gw8_wgrad": _conv2d_gw8_wgrad.WGRAD,
    "conv2d_gw8_wgrad_reduce": _conv2d_gw8_wgrad_reduce.WGRAD_REDUCE,
    "conv2d_gw8_wgrad_dgrad": _conv2d_gw8_wgrad.WGRAD_DGRAD,
}

__all__ = ["KERNELS", "KernelDef", "KernelSpec", "KernelStats"]
