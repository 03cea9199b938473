"""Element types of generated tensors and constants: `dtype.float`, `dtype.half`, `dtype.half8`...

Each `Dtype` names a C++ type that exists where the header is compiled, its size in bytes, and the
spio header that declares it (the generated header includes it, so the type is known before the
kernel source's own includes). Vector types hold several scalars in one element: `half8` is eight
halves in 16 bytes (`spio::Half8`), `uint4` is 16 raw bytes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Dtype:
    """A C++ element type.

    Attributes:
        name: the Python-side name (`dtype.<name>`).
        cpp: the C++ spelling.
        nbytes: size of one element in bytes.
        lanes: scalars per element (8 for half8, 1 for scalars).
        include: the header that declares `cpp`, or None for builtin types.
    """

    name: str
    cpp: str
    nbytes: int
    lanes: int = 1
    include: str | None = None

    def __repr__(self) -> str:
        return f"dtype.{self.name}"


_DEVICE = "spio/device.h"  # cuda_fp16.h / cuda_bf16.h under NVRTC and nvcc; nothing under g++
_VECTOR = "spio/vector.h"  # spio::Half8, spio::Bf16x8 (device only)

# Scalars. These names shadow builtins only inside this module, which uses none after this line.
float = Dtype("float", "float", 4)  # noqa: A001
double = Dtype("double", "double", 8)
half = Dtype("half", "__half", 2, include=_DEVICE)
bfloat16 = Dtype("bfloat16", "__nv_bfloat16", 2, include=_DEVICE)
int32 = Dtype("int32", "int", 4)
uint32 = Dtype("uint32", "unsigned", 4)
int64 = Dtype("int64", "long long", 8)
bool = Dtype("bool", "bool", 1)  # noqa: A001

# Vectors.
half2 = Dtype("half2", "__half2", 4, lanes=2, include=_DEVICE)
bfloat16x2 = Dtype("bfloat16x2", "__nv_bfloat162", 4, lanes=2, include=_DEVICE)
half8 = Dtype("half8", "spio::Half8", 16, lanes=8, include=_VECTOR)
bfloat16x8 = Dtype("bfloat16x8", "spio::Bf16x8", 16, lanes=8, include=_VECTOR)
uint4 = Dtype("uint4", "uint4", 16, lanes=4)

ALL: tuple[Dtype, ...] = (
    float, double, half, bfloat16, int32, uint32, int64, bool,
    half2, bfloat16x2, half8, bfloat16x8, uint4,
)  # fmt: skip


def by_name(name: str) -> Dtype:
    """The dtype of a tensor data type name: "float16" (half), "bfloat16" or "float32" (float)."""
    return {"float16": half, "bfloat16": bfloat16, "float32": float}[name]
