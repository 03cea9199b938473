"""Kernel families: params, configs, specs and launches, and the registry that lists them."""

from spio.kernels.kernel_def import KernelDef, KernelSpec, KernelStats

# Registry of every kernel family, written out (no discovery by import side effect).
KERNELS: dict[str, KernelDef] = {}

__all__ = ["KERNELS", "KernelDef", "KernelSpec", "KernelStats"]
