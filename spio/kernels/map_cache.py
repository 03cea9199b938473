"""Tensor maps of one tensor description, one per address, for the launches that pass them.

`spio.cuda.tensor_map` encodes maps and keeps nothing; a launch bound to a layer or problem (the
Hopper matmul's `Sm90Launch`, conv2d_gw8's `FpropLaunch` / `DgradLaunch`) keeps one `MapCache`
per operand, so a steady loop encodes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from spio.cuda.tensor_map import check_tiled, driver_args


class MapCache:
    """Tensor maps of one tensor description at any address: `get(address)` is the encoded map
    (the driver's 128 bytes) of a tensor laid out as `shape` / `strides` (outermost first) at
    that address, copied in boxes of `box` elements.

    A map holds its tensor's address, so a launch needs the map of each call's tensor. The
    description is validated once here; a miss is one driver call, kept for later calls at the
    same address: weights keep theirs, and PyTorch's caching allocator hands activations the same
    few blocks, so a steady loop encodes nothing. At most `limit` addresses are kept (the oldest
    dropped first). A miss takes a lock (launch plans are shared by threads); a hit is one dict
    lookup.
    """

    __slots__ = ("_args", "_maps", "_lock", "_limit")

    def __init__(
        self,
        dtype: str,
        shape: Sequence[int],
        strides: Sequence[int],
        box: Sequence[int],
        *,
        swizzle: int = 0,
        l2_promotion: int = 128,
        limit: int = 64,
    ) -> None:
        check_tiled(16, dtype, shape, strides, box, swizzle, l2_promotion)
        self._args = driver_args(dtype, shape, strides, box, swizzle, l2_promotion)
        self._maps: dict[int, bytes] = {}
        self._lock = threading.Lock()
        self._limit = limit

    def get(self, address: int) -> bytes:
        """The map at `address` (a 16-byte aligned device address; a misaligned one is a
        ValueError when it is first encoded)."""
        raw = self._maps.get(address)
        return raw if raw is not None else self._encode(address)

    def _encode(self, address: int) -> bytes:
        from spio.cuda import driver

        if address % 16:  # checked on a miss only: a hit was aligned when it was encoded
            raise ValueError(
                f"tensor map: the tensor must start 16-byte aligned (TMA's rule), got address "
                f"{address:#x}; pass a fresh allocation (e.g. t.clone())"
            )
        with self._lock:
            raw = self._maps.get(address)
            if raw is None:
                if len(self._maps) >= self._limit:
                    del self._maps[next(iter(self._maps))]
                a = self._args
                raw = driver.tensor_map_encode_tiled(a[0], address, *a[1:])
                self._maps[address] = raw
        return raw

    def __len__(self) -> int:
        return len(self._maps)
