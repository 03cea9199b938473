"""spio.kernels.map_cache.MapCache on the host: a misaligned address is a clear error before the
driver sees it (TMA needs 16-byte aligned tensors), on its first encode only (hits cost one
dict lookup)."""

from __future__ import annotations

import pytest

from spio.kernels.map_cache import MapCache


def test_misaligned_address_is_named_before_the_driver(monkeypatch):
    from spio.cuda import driver

    calls: list[int] = []
    monkeypatch.setattr(driver, "tensor_map_encode_tiled", lambda *a: calls.append(a[1]) or b"m")
    cache = MapCache("float16", (64, 64), (64, 1), (64, 64), swizzle=128)
    with pytest.raises(ValueError, match=r"16-byte aligned .* got address 0x1002"):
        cache.get(0x1002)
    assert calls == [] and len(cache) == 0
    assert cache.get(0x1000) == b"m" and cache.get(0x1000) == b"m"
    assert calls == [0x1000]
