"""NVRTC compiler: locate NVRTC, compile CUDA C++ (with @spio blocks) to cubin, cache on disk.

Nothing happens at import: NVRTC is located and loaded at the first compile (or `describe()`).
"""

from spio.compiler.cache import CacheStats, DiskCache, default_cache
from spio.compiler.compile import compile
from spio.compiler.disasm import disassemble, instruction_counts
from spio.compiler.pool import CompileJob, compile_many
from spio.compiler.resources import KernelResources, kernel_resources
from spio.compiler.toolchain import describe, nvrtc_version, supported_archs

__all__ = [
    "CacheStats",
    "CompileJob",
    "DiskCache",
    "KernelResources",
    "compile",
    "compile_many",
    "default_cache",
    "describe",
    "disassemble",
    "instruction_counts",
    "kernel_resources",
    "nvrtc_version",
    "supported_archs",
]
