"""TMA tensor maps: the 128-byte descriptor through which a Hopper kernel's tensor memory
accelerator copies tiles between global and shared memory (`cp.async.bulk.tensor`, sm_90+).

    from spio.cuda.tensor_map import tiled
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    a_map = tiled(a.data_ptr(), "float16", a.shape, a.stride(), box=(64, 64), swizzle=128)
    f = module.function("gemm", signature="tpi")     # 't': the map, passed by value
    f.launch(grid, block, (a_map, out, m), stream=...)

The kernel takes it as `const __grid_constant__ spio::tma::Descriptor` (spio/tma.h) and copies
the box at given coordinates with `spio::tma::load_2d`. Shapes, strides and boxes are given
outermost first, as PyTorch's sizes and strides (the driver wants them innermost first; `tiled`
reverses them). Encoding needs the driver (cuTensorMapEncodeTiled) but no context or device; the
map holds the address, so it is valid while that memory is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# name -> (CUtensorMapDataType, bytes per element), cuda.h's values.
DTYPES: dict[str, tuple[int, int]] = {
    "uint8": (0, 1),
    "uint16": (1, 2),
    "uint32": (2, 4),
    "int32": (3, 4),
    "uint64": (4, 8),
    "int64": (5, 8),
    "float16": (6, 2),
    "float32": (7, 4),
    "float64": (8, 8),
    "bfloat16": (9, 2),
}
# Swizzle span in bytes -> CUtensorMapSwizzle; L2 promotion in bytes -> CUtensorMapL2promotion.
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}
L2_PROMOTIONS = {0: 0, 64: 1, 128: 2, 256: 3}
MAX_RANK = 5
MAX_BOX = 256


@dataclass(frozen=True, slots=True)
class TensorMap:
    """An encoded tensor map (`raw`, the driver's 128 opaque bytes) and what it describes.

    Pass it for a signature letter 't'. shape and box are outermost first; swizzle in bytes.
    """

    raw: bytes
    dtype: str
    shape: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int

    def __post_init__(self) -> None:
        if not isinstance(self.raw, bytes) or len(self.raw) != 128:
            raise ValueError("TensorMap.raw must be the driver's 128 bytes")

    @property
    def box_bytes(self) -> int:
        """Bytes one copy of the box brings in (what the mbarrier's expect_tx must announce)."""
        size = DTYPES[self.dtype][1]
        for b in self.box:
            size *= b
        return size


def check_tiled(
    address: int,
    dtype: str,
    shape: Sequence[int],
    strides: Sequence[int],
    box: Sequence[int],
    swizzle: int = 0,
    l2_promotion: int = 128,
) -> None:
    """Raises ValueError / TypeError naming the argument, the rule and the fix for anything the
    driver would refuse (cuda.h's rules for cuTensorMapEncodeTiled, interleave none)."""
    if dtype not in DTYPES:
        raise ValueError(f"tensor map: dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    esize = DTYPES[dtype][1]
    shape, strides, box = tuple(shape), tuple(strides), tuple(box)
    rank = len(shape)
    if not 1 <= rank <= MAX_RANK:
        raise ValueError(f"tensor map: shape needs 1 to {MAX_RANK} dimensions, got {shape}")
    if len(strides) != rank or len(box) != rank:
        raise ValueError(
            f"tensor map: shape {shape}, strides {strides} and box {box} need one entry per "
            "dimension each (outermost first, as torch's size() and stride())"
        )
    for name, values in (("shape", shape), ("strides", strides), ("box", box)):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise TypeError(f"tensor map: {name} must hold ints, got {values}")
    if not isinstance(address, int) or address <= 0 or address % 16:
        raise ValueError(
            f"tensor map: address must be a 16-byte aligned device address, got {address!r}; "
            "pass tensor.data_ptr() of a tensor whose storage offset keeps that alignment"
        )
    if any(not 1 <= d <= 2**32 for d in shape):
        raise ValueError(f"tensor map: each dimension of shape must be in [1, 2**32], got {shape}")
    if strides[-1] != 1:
        raise ValueError(
            f"tensor map: the innermost dimension must be contiguous (stride 1), got strides "
            f"{strides}; make the tensor contiguous, or order the dims so the last has stride 1"
        )
    for i, st in enumerate(strides[:-1]):
        if st <= 0 or (st * esize) % 16 or st * esize >= 2**40:
            raise ValueError(
                f"tensor map: stride {i} ({st} elements = {st * esize} bytes) must be a positive "
                "multiple of 16 bytes below 2**40; pad the rows (e.g. allocate the inner "
                "dimension rounded up to a multiple of 16 bytes and view a slice)"
            )
    if any(not 1 <= b <= MAX_BOX for b in box):
        raise ValueError(f"tensor map: each box dimension must be in [1, {MAX_BOX}], got {box}")
    inner = box[-1] * esize
    if inner % 16:
        raise ValueError(
            f"tensor map: the box's innermost extent ({box[-1]} x {esize} B = {inner} B) must "
            "be a multiple of 16 bytes"
        )
    if swizzle not in SWIZZLES:
        raise ValueError(
            f"tensor map: swizzle must be one of {sorted(SWIZZLES)} (bytes), got {swizzle!r}"
        )
    if swizzle and inner > swizzle:
        raise ValueError(
            f"tensor map: with a {swizzle}-byte swizzle the box's innermost extent may be at most "
            f"{swizzle} bytes, got {inner}; narrow box[-1] to {swizzle // esize} elements"
        )
    if l2_promotion not in L2_PROMOTIONS:
        raise ValueError(
            f"tensor map: l2_promotion must be one of {sorted(L2_PROMOTIONS)} (bytes), got "
            f"{l2_promotion!r}"
        )


def tiled(
    address: int,
    dtype: str,
    shape: Sequence[int],
    strides: Sequence[int],
    box: Sequence[int],
    *,
    swizzle: int = 0,
    l2_promotion: int = 128,
    oob_nan: bool = False,
) -> TensorMap:
    """The tensor map of a strided tensor at `address`, copied in boxes of `box` elements.

    Args:
        address: the tensor's device address (data_ptr()), 16-byte aligned.
        dtype: element type, a key of DTYPES ("float16", "bfloat16", "float32", ...).
        shape, strides: sizes and strides in elements, outermost first (torch's size() and
            stride()); the innermost stride must be 1, the others multiples of 16 bytes.
        box: the tile one copy brings in, outermost first; each 1..256, the innermost a
            multiple of 16 bytes (and at most `swizzle` bytes when swizzled).
        swizzle: 0 (none), 32, 64 or 128: the shared-memory swizzle span in bytes. With 128,
            16-byte chunk c of box row r lands at chunk c ^ (r % 8) of that row.
        l2_promotion: 0, 64, 128 or 256 bytes.
        oob_nan: fill elements outside the tensor with NaN instead of zero (floating types).

    Raises:
        ValueError, TypeError: an argument the driver would refuse (`check_tiled`).
        CudaDriverError: the driver refused it anyway; LibraryNotFoundError: no driver.
    """
    check_tiled(address, dtype, shape, strides, box, swizzle, l2_promotion)
    from spio.cuda import driver

    args = driver_args(dtype, shape, strides, box, swizzle, l2_promotion, oob_nan)
    raw = driver.tensor_map_encode_tiled(args[0], address, *args[1:])
    return TensorMap(raw, dtype, tuple(shape), tuple(box), swizzle)


def driver_args(
    dtype: str,
    shape: Sequence[int],
    strides: Sequence[int],
    box: Sequence[int],
    swizzle: int = 0,
    l2_promotion: int = 128,
    oob_nan: bool = False,
) -> tuple:
    """What `tiled` passes `driver.tensor_map_encode_tiled`, less the address (which goes second):
    the data type, then dims, byte strides and box innermost first, element strides of 1, no
    interleave, the swizzle, L2 promotion and out-of-bounds fill. Arguments as `tiled`'s, already
    validated (`check_tiled`)."""
    esize = DTYPES[dtype][1]
    return (
        DTYPES[dtype][0],
        tuple(reversed(tuple(shape))),
        tuple(s * esize for s in reversed(tuple(strides)[:-1])),
        tuple(reversed(tuple(box))),
        (1,) * len(shape),
        0,
        SWIZZLES[swizzle],
        L2_PROMOTIONS[l2_promotion],
        1 if oob_nan else 0,
    )
