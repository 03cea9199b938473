"""Host tests of the Hopper matmul kernel (spio/src/matmul_sm90.cu): no GPU needed.

Every config compiles for sm_90a with no local memory, one CTA of 384 threads per SM within the
register file, the wgmma of its BLOCK_N in the SASS, TMA loads and mbarrier waits; the config
space respects the shared-memory limit; the spec refuses row-major B; nothing is offered off
sm_90. Clusters (cluster_m 2): the SASS has the multicast TMA load, the remote mbarrier arrival
and the cluster barrier, the cubin declares a 2 x 1 x 1 cluster (what cuLaunchKernel launches
with), the grid is padded to pairs of M tiles and the B map's box is half the tile; the plain
kernel (cluster_m 1) has none of it and its SASS is what `data/matmul_sm90_sass.json` pins.
Persistent configs: every one compiles within the register budget `ctas_per_sm` counts on, the
grid is min(tiles, SMs x CTAs per SM) (whole clusters), and the plain kernel's pinned SASS is
untouched by the persistent code (PERSISTENT 0 compiles the one-tile-per-CTA path). The
values are checked on an H100/H200 by tests/gpu/kernels/test_matmul_sm90.py.

A deliberate change of the plain kernel's code rewrites the pinned SASS digests:
    python tests/host/kernels/test_matmul_sm90.py --write
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from spio.compiler import kernel_resources, nvrtc_version
from spio.compiler.locate import find_tool
from spio.cuda import known_device
from spio.kernels import matmul_sm90 as k90
from spio.kernels import matmul_splitk_reduce as sk
from spio.kernels import matmul_tail_sum as ts
from spio.kernels.loader import compile_spec
from spio.kernels.matmul_params import MatmulParams

H100 = known_device("H100")
FLAGS = [("float16", "float16", False), ("bfloat16", "float32", True)]


def _p(dtype="float16", out="float16", bias=False, b_transposed=True) -> MatmulParams:
    return MatmulParams(1, 1, 8, dtype, out, b_transposed=b_transposed, has_bias=bias)


def test_space_fits_shared_memory_and_is_sm90_only():
    cfgs = k90.configs(_p(), H100)
    assert {c.block_n for c in cfgs if not c.swap_ab} == set(k90.BLOCK_NS)
    assert all(c.smem() <= H100.max_smem_per_block_optin for c in cfgs)
    assert max(c.stages for c in cfgs if c.block_n == 256) == 4  # 48 KiB a slot
    assert k90.heuristic(_p(), H100) in cfgs
    # Every plain config again as a cluster of two (same shared memory: B's halves share a slot),
    # and all of those again persistent; then the split-K ones.
    split = [c for c in cfgs if c.split_k > 1 and not c.swap_ab]
    assert split == [
        k90.MatmulSm90Config(n, s, split_k=k)
        for k in (2, 4, 8)
        for n in k90.SPLIT_BLOCK_NS
        for s in k90.SPLIT_STAGE_COUNTS
        if k90.MatmulSm90Config(n, s).smem() <= H100.max_smem_per_block_optin
    ]
    tail = [c for c in cfgs if c.tail]
    assert tail == [k90.MatmulSm90Config(n, s, tail=True) for n, s in k90.TAIL_CONFIGS]
    once = [c for c in cfgs if not (c.persistent or c.split_k > 1 or c.tail or c.swap_ab)]
    plain = [c for c in once if c.cluster_m == 1]
    assert [c for c in once if c.cluster_m == 2] == [
        k90.MatmulSm90Config(c.block_n, c.stages, cluster_m=2) for c in plain
    ]
    assert [c for c in cfgs if c.persistent] == [replace(c, persistent=True) for c in once]
    # Decode (M <= SWAP_MAX_M, B as (N, K)): the swapped configs of the narrowest width that
    # holds M, each ring depth and split; none past SWAP_MAX_M.
    swap = [c for c in cfgs if c.swap_ab]
    assert swap == [
        k90.MatmulSm90Config(16, s, split_k=k, swap_ab=True)
        for k in k90.SPLIT_KS
        for s in k90.SWAP_STAGE_COUNTS
    ]
    assert cfgs == once + [replace(c, persistent=True) for c in once] + split + tail + swap
    for m, width in ((16, 16), (17, 32), (33, 64), (64, 64)):
        assert {c.block_n for c in k90.configs(replace(_p(), m=m), H100) if c.swap_ab} == {width}
    assert not any(c.swap_ab for c in k90.configs(replace(_p(), m=65), H100))
    assert k90.DEF.compiled(MatmulParams(300, 70, 16, b_transposed=True)) == _p()
    # A row-major (K, N) B: the same space without clusters or swaps.
    assert k90.configs(_p(b_transposed=False), H100) == [
        c for c in cfgs if c.cluster_m == 1 and not c.swap_ab
    ]
    with pytest.raises(ValueError, match="swap_ab reads B as the kernel's K-major A"):
        k90.spec(_p(b_transposed=False), swap[0])
    with pytest.raises(ValueError, match=r"block_n must be one of \(64, 128, 256\), got 16"):
        k90.MatmulSm90Config(block_n=16)
    with pytest.raises(ValueError, match=r"one of \(16, 32, 64\) with swap_ab, got 128"):
        k90.MatmulSm90Config(block_n=128, swap_ab=True)
    for other in ({"cluster_m": 2}, {"persistent": True}, {"tail": True}, {"a_transposed": True}):
        with pytest.raises(ValueError, match="swap_ab runs plain or split-K CTAs"):
            k90.MatmulSm90Config(64, swap_ab=True, **other)
    with pytest.raises(ValueError, match="swap_ab must be a bool"):
        k90.MatmulSm90Config(64, swap_ab=1)
    assert swap[-1].label() == "n16 s8 k8 sw"
    assert k90.configs(_p(), known_device("A100")) == []
    with pytest.raises(ValueError, match="row-major .* runs without clusters"):
        k90.spec(_p(b_transposed=False), k90.MatmulSm90Config(cluster_m=2))
    with pytest.raises(ValueError, match="block_n must be one of"):
        k90.MatmulSm90Config(block_n=96)
    for bad in (3, 4, True, 0):
        with pytest.raises(ValueError, match="cluster_m must be one of"):
            k90.MatmulSm90Config(cluster_m=bad)
    for bad in (1, 0, "yes", None):
        with pytest.raises(ValueError, match="persistent must be a bool"):
            k90.MatmulSm90Config(persistent=bad)
    for bad in (3, 16, True, 0):
        with pytest.raises(ValueError, match="split_k must be one of"):
            k90.MatmulSm90Config(split_k=bad)
    for other in ({"cluster_m": 2}, {"persistent": True}):
        with pytest.raises(ValueError, match="split_k > 1 runs plain CTAs"):
            k90.MatmulSm90Config(split_k=2, **other)
    for bad in (1, 0, "yes", None):
        with pytest.raises(ValueError, match="tma_store must be a bool"):
            k90.MatmulSm90Config(tma_store=bad)
        with pytest.raises(ValueError, match="a_transposed must be a bool"):
            k90.MatmulSm90Config(a_transposed=bad)
    with pytest.raises(ValueError, match=r"\(K, M\) \(a_transposed\) runs without clusters"):
        k90.MatmulSm90Config(a_transposed=True, cluster_m=2)
    # The layout of A is the caller's: the space never lists it.
    assert not any(c.a_transposed for c in cfgs)
    assert k90.MatmulSm90Config(a_transposed=True).label() == "n128 s4 at"


def test_tma_store_where_the_tile_and_c_allow_it(monkeypatch):
    """The TMA-store epilogue runs for 128- and 256-wide tiles without split-K, needs 32 KiB
    of staging (still 4 slots of 128 x 256), and `bound` turns it off where C's rows are not
    whole 16-byte units, `launch` also for a C that does not start 16-byte aligned: each case
    loads the register-epilogue variant (" rs" in the label)."""
    import torch

    C = k90.MatmulSm90Config
    assert [k90.stores_by_tma(C(n)) for n in k90.BLOCK_NS] == [False, True, True]
    assert not k90.stores_by_tma(C(128, 6, split_k=4)) and not k90.stores_by_tma(C(tma_store=False))
    assert C(256, 4).smem() == C(256, 4, tma_store=False).smem() + k90.STAGING_BYTES
    assert C(64, 4).smem() == C(64, 4, tma_store=False).smem()
    assert C(256, 4).smem() <= H100.max_smem_per_block_optin
    assert (
        C(256, 4, tma_store=False).label() == "n256 s4 rs"
        and C(64, tma_store=False).label() == "n64 s4"
    )
    cases = ((8, "float16", True), (12, "float16", False), (4, "float32", True),
             (6, "float32", False), (1000, "float16", True), (257, "float32", False))  # fmt: skip
    for n, out, fits in cases:
        assert k90.tma_store_fits(MatmulParams(5, n, 64, "float16", out, b_transposed=True)) == fits

    loaded: list = []

    class Cache:
        def get(self, kdef, params, cfg, dev):
            loaded.append(cfg)
            return SimpleNamespace(bind=lambda grid, dependent=False: lambda args, stream: None)

    for n, block_n, want in ((264, 256, True), (257, 256, False), (264, 64, False)):
        p = MatmulParams(130, n, 64, "float16", "float16", b_transposed=True)
        k90.bound(p, C(block_n, 2), H100, Cache())
        assert loaded[-1].tma_store == want, (n, block_n)
    from spio.cuda import driver

    p = MatmulParams(16, 64, 64, "float16", "float16", b_transposed=True)
    a, b = torch.empty(16, 64, dtype=torch.float16), torch.empty(64, 64, dtype=torch.float16)
    c_odd = torch.empty(16 * 64 + 1, dtype=torch.float16)[1:].view(16, 64)  # 2 bytes off
    monkeypatch.setattr(driver, "tensor_map_encode_tiled", lambda *args: bytes(128))
    for c, want in ((torch.empty(16, 64, dtype=torch.float16), True), (c_odd, False)):
        k90.launch(p, C(128, 2), c, a, b, device=H100, cache=Cache())
        assert loaded[-1].tma_store == want


@pytest.mark.parametrize(
    "m, n, k, large",
    [
        (1, 1, 8, False),
        (16, 4096, 4096, False),
        (4096, 64, 4096, False),
        (300, 70, 16, False),
        (2048, 2048, 2048, False),  # 128 tiles of 128 x 256: one wave
        (8192, 8192, 8192, True),  # 2048 tiles: 16 waves
        (1024, 8192, 1024, True),  # 256 tiles: two waves
        (777, 5000, 3000, False),  # 140 tiles: the cost model's pick is a split tail
        (128, 131072, 4096, False),  # 512 tiles in one row: under LARGE_MIN_M_TILES
        (896, 32768, 4096, False),  # 7 rows of 128 tiles
        (1024, 32768, 4096, True),  # 8 rows
    ],
)
def test_heuristic_takes_the_persistent_cluster_config_for_large_products(m, n, k, large):
    """A plain 256-wide pick of two or more waves becomes LARGE_PICK (persistent, clusters of
    two) for B as (N, K); a row-major B, one wave, a split tail and every other pick stay as
    the cost model has them (plain CTAs, no cluster)."""
    for b_transposed in (True, False):
        cfg = k90.heuristic(MatmulParams(m, n, k, b_transposed=b_transposed), H100)
        if large and b_transposed:
            assert cfg == k90.LARGE_PICK, cfg
            assert k90.cost_pick(MatmulParams(m, n, k), H100) == k90.HEURISTIC_CANDIDATES[0]
        else:
            assert cfg.cluster_m == 1 and not cfg.persistent, cfg


@pytest.mark.parametrize(
    "m, n, k, split_k",
    [
        (16, 4096, 4096, 4),  # 32 tiles x 4 <= 132 SMs, 16 k tiles each
        (1, 4096, 11008, 4),  # 8 would be 256 CTAs
        (128, 4096, 4096, 4),  # still one row of tiles
        (129, 4096, 4096, 1),  # two rows: no split
        (16, 64, 4096, 8),  # one tile: the most splits of >= 8 k tiles
        (16, 4096, 1024, 2),  # 16 k tiles: two parts of 8
        (16, 4096, 960, 1),  # 15 k tiles: too short to split
        (16, 11008, 4096, 1),  # 86 tiles: 2 x 86 > 132
    ],
)
def test_split_choice_for_one_row_of_tiles(m, n, k, split_k):
    p = MatmulParams(m, n, k, b_transposed=True)
    cfg = k90.split_choice(p, H100) or k90.MatmulSm90Config()
    assert cfg.split_k == split_k, cfg
    if n <= 64:  # what the op runs there (wider N: the cost model's pick)
        assert k90.heuristic(p, H100) == (cfg if split_k > 1 else k90.MatmulSm90Config(64, 4))
    tiles_m, tiles_n = cfg.tiles(p)
    assert k90.grid(p, cfg, H100) == (tiles_m * tiles_n, split_k, 1)
    if split_k > 1:
        assert cfg.label().endswith(f" k{split_k}") and cfg.block_n == (64 if n <= 64 else 128)


@pytest.mark.parametrize("tiles_m", [1, 2, 3, 8, 9])
def test_cluster_grid_is_padded_to_pairs_of_m_tiles(tiles_m):
    """The grid holds ceil(tiles_m / 2) pairs of M tiles per N tile (a multiple of the cluster);
    the plain grid is one CTA per tile."""
    p = MatmulParams(tiles_m * k90.BLOCK_M - 5, 3 * 128, 64, b_transposed=True)
    plain = k90.MatmulSm90Config(block_n=128)
    cluster = k90.MatmulSm90Config(block_n=128, cluster_m=2)
    assert k90.grid(p, plain, H100) == (tiles_m * 3, 1, 1)
    assert k90.grid(p, cluster, H100) == (2 * ((tiles_m + 1) // 2) * 3, 1, 1)
    assert k90.grid(p, cluster, H100)[0] % 2 == 0
    assert cluster.label() == "n128 s4 c2" and plain.label() == "n128 s4"
    assert replace(cluster, persistent=True).label() == "n128 s4 c2 p"


def test_ctas_per_sm_on_the_h100():
    """Threads (5 of 384), shared memory (+ 1 KiB reserved a CTA) and registers (the budget,
    8-register units): 2 CTAs of 64-wide tiles with up to 4 slots, else 1."""
    want = {(64, 2): 2, (64, 3): 2, (64, 4): 2, (64, 5): 1, (128, 2): 1, (256, 4): 1}
    for (block_n, stages), n in want.items():
        assert k90.ctas_per_sm(k90.MatmulSm90Config(block_n, stages), H100) == n
    # The register bound alone: 80 registers a thread fit two CTAs of 384 threads, 81 (88) one.
    cfg = k90.MatmulSm90Config(64, 2)
    assert k90.ctas_per_sm(cfg, H100, registers=80) == 2
    assert k90.ctas_per_sm(cfg, H100, registers=81) == 1


@pytest.mark.parametrize(
    "m, n, cluster_m",
    [(1, 1, 1), (1000, 1000, 1), (8192, 8192, 1), (33 * 128, 5 * 256, 1), (8192, 8192, 2),
     (3 * 128, 64, 2), (9 * 128, 2 * 256, 2), (67 * 128, 256, 2)],
)  # fmt: skip
@pytest.mark.parametrize("block_n, stages", [(64, 2), (64, 8), (128, 6), (256, 4)])
def test_persistent_grid_is_min_of_tiles_and_resident_ctas(m, n, cluster_m, block_n, stages):
    """grid = min(tiles (M padded to whole clusters), SMs x CTAs per SM rounded down to whole
    clusters): never more CTAs than tiles, never more than the SMs hold at once, always a
    multiple of the cluster; the non-persistent grid is every tile."""
    p = MatmulParams(m, n, 64, b_transposed=True)
    cfg = k90.MatmulSm90Config(block_n, stages, cluster_m=cluster_m, persistent=True)
    tiles = k90.grid(p, replace(cfg, persistent=False), H100)[0]
    resident = H100.sm_count * k90.ctas_per_sm(cfg, H100)
    ctas = k90.grid(p, cfg, H100)[0]
    assert ctas == min(tiles, resident // cluster_m * cluster_m)
    assert 0 < ctas <= resident and ctas % cluster_m == 0
    # Every tile (pair) is walked by exactly one CTA (cluster): t = first, first + stride, ...
    work, stride = tiles // cluster_m, ctas // cluster_m
    walked = sorted(t for first in range(stride) for t in range(first, work, stride))
    assert walked == list(range(work))


@pytest.mark.parametrize("flags", FLAGS, ids=str)
def test_split_sum_compiles_without_local_memory(flags):
    """Every variant of the split-K sum (each split_k, float4 and scalar) for each dtype flag."""
    for n in (64, 70):
        p = replace(_p(*flags), n=n)
        for rcfg in sk.configs(p, H100):
            assert rcfg.vec == (4 if n % 4 == 0 else 1)
            spec = sk.spec(p, rcfg, H100)
            res = kernel_resources(compile_spec(spec, H100.arch))["matmul_splitk_reduce"]
            assert res.local_bytes == 0, f"{rcfg}: {res}"
    assert sk.config_for(replace(_p(), n=64), 8) == sk.SplitSumConfig(8, 4)
    assert sk.grid(MatmulParams(16, 4096, 64), sk.SplitSumConfig(4, 4)) == (64, 1, 1)
    assert sk.grid(MatmulParams(3, 70, 64), sk.SplitSumConfig(4, 1)) == (1, 1, 1)


@pytest.mark.parametrize("b_transposed", [True, False])
@pytest.mark.parametrize("flags", FLAGS, ids=str)
def test_every_config_compiles_without_local_memory(flags, b_transposed):
    p = _p(*flags, b_transposed=b_transposed)
    for cfg in k90.configs(p, H100):
        res = kernel_resources(compile_spec(k90.spec(p, cfg, H100), H100.arch))["matmul_sm90"]
        assert res.local_bytes == 0, f"{cfg}: {res}"
        # A rebalancing kernel (setmaxnreg) must launch with the cap's 168 registers a thread:
        # its consumers raise theirs to 232 from the pool the launch allocated.
        assert cfg.block_n < 128 or res.registers == 168, f"{cfg}: {res}"
        # One CTA of 384 threads must fit the 64 K-register file.
        assert res.registers * k90.THREADS <= H100.regs_per_sm, f"{cfg}: {res}"
        # Within the budget the persistent grid counts on (same CTAs per SM either way; swapped
        # configs, never persistent, may hold more than their budget counts).
        assert res.registers <= k90.REGISTERS[cfg.block_n], f"{cfg}: {res}"
        if not cfg.swap_ab:
            assert k90.ctas_per_sm(cfg, H100, res.registers) == k90.ctas_per_sm(cfg, H100)


@pytest.mark.parametrize("m", [17, 33])
@pytest.mark.parametrize("flags", FLAGS, ids=str)
def test_wider_swapped_variants_compile_within_two_ctas_an_sm(flags, m):
    """The 32- and 64-wide swapped variants (M 17-64; `test_every_config_compiles_without_local_
    memory` compiles the 16-wide ones): no local memory, within the 80 registers that keep two
    CTAs an SM (the 64-wide ones sit at the cap)."""
    p = replace(_p(*flags), m=m)
    cfgs = [c for c in k90.configs(p, H100) if c.swap_ab]
    assert {c.block_n for c in cfgs} == {32 if m == 17 else 64}
    for cfg in cfgs:
        q = replace(p, out_dtype="float32", has_bias=False) if cfg.split_k > 1 else p
        res = kernel_resources(compile_spec(k90.spec(q, cfg, H100), H100.arch))["matmul_sm90"]
        assert res.local_bytes == 0 and res.registers <= k90.REGISTERS[cfg.block_n], (cfg, res)


@pytest.mark.parametrize("b_transposed", [True, False])
def test_transposed_a_compiles_without_local_memory(b_transposed):
    """An A given as (K, M) (`a_transposed`): every config without clusters, B either way,
    compiles with no local memory, within the register budget and (SASS, where cuobjdump is
    found) with its wgmma batches unserialized and A's two boxes a slot."""
    p = _p(b_transposed=b_transposed)
    for cfg in k90.configs(p, H100):
        if cfg.cluster_m > 1 or cfg.swap_ab:
            continue
        cfg = replace(cfg, a_transposed=True)
        cubin = compile_spec(k90.spec(p, cfg, H100), H100.arch)
        res = kernel_resources(cubin)["matmul_sm90"]
        assert res.local_bytes == 0 and res.registers <= k90.REGISTERS[cfg.block_n], (cfg, res)
        assert cfg.block_n < 128 or res.registers == 168, (cfg, res)  # rebalanced (setmaxnreg)
        if find_tool("cuobjdump") is not None and cfg.stages == 2:
            from spio.compiler.disasm import disassemble

            sass = disassemble(cubin)
            hgmma = re.findall(r"HGMMA\.[^;]*;", sass)
            assert hgmma and sum("gsb0" not in h for h in hgmma) >= len(hgmma) // 2, cfg
            want = 2 + (1 if b_transposed else cfg.block_n // 64)
            assert len(re.findall(r"UTMALDG\.2D", sass)) >= want, cfg


@pytest.mark.parametrize("block_n", k90.BLOCK_NS)
def test_rebalancing_variants_launch_at_the_register_cap(block_n):
    """setmaxnreg raises the consumers' registers from the pool the launch allocated, so a
    128/256-wide variant must compile to the cap (168) in every epilogue: the register one
    (`tma_store` off, as the op runs C's unaligned rows) too; `spec` asks the loader to check it
    (`min_registers`), and 64-wide tiles (two CTAs an SM) ask nothing."""
    for cfg in (
        k90.MatmulSm90Config(block_n, 2, tma_store=False),
        k90.MatmulSm90Config(block_n, 3),
    ):
        spec = k90.spec(_p(), cfg, H100)
        assert spec.min_registers == (168 if block_n >= 128 else 0), cfg
        res = kernel_resources(compile_spec(spec, H100.arch))["matmul_sm90"]
        assert res.local_bytes == 0 and (block_n < 128 or res.registers == 168), (cfg, res)


def test_loading_refuses_a_rebalancing_variant_below_the_cap(monkeypatch):
    """A compiler that gave a rebalancing variant fewer registers than its consumers raise to
    would hang the launch: `load_spec` raises instead, naming the variant and the NVRTC; one
    at the cap loads."""
    import spio.cuda
    from spio.kernels import loader

    class Function:
        num_regs = 0

        def set_max_dynamic_smem(self, smem):
            pass

    class Module:
        @staticmethod
        def load(cubin):
            return Module()

        def function(self, entry, signature):
            return Function()

    monkeypatch.setattr(spio.cuda, "Module", Module)
    monkeypatch.setattr(loader, "compile_spec", lambda spec, arch: b"")
    spec = k90.spec(_p(), k90.MatmulSm90Config(256, 4), H100)
    for regs, ok in ((160, False), (168, True)):
        Function.num_regs = regs
        if ok:
            assert loader.load_spec(spec, H100.arch).spec is spec
        else:
            with pytest.raises(RuntimeError, match="160 registers a thread, below the 168"):
                loader.load_spec(spec, H100.arch)
    Function.num_regs = 56  # a 64-wide variant asks for no minimum
    assert loader.load_spec(k90.spec(_p(), k90.MatmulSm90Config(64, 4), H100), H100.arch)


@pytest.mark.parametrize("a_transposed", [False, True])
@pytest.mark.parametrize("b_transposed", [True, False])
def test_ptx_transpose_flags_and_descriptor_strides(b_transposed, a_transposed):
    """Each layout's wgmma carries its transpose immediates (tnspA, tnspB: 1 for an M-major A / an
    N-major B) and its descriptors the strides of that layout: the N-major B's LBO of 8 KiB (one
    64-wide block, 0x200 in 16-byte units at bit 16) and every swizzled operand's SBO of 1024
    (0x40 at bit 32). A wrong flag or stride would compute garbage that only a GPU test sees."""
    from spio.compiler import compile as spio_compile

    cfg = k90.MatmulSm90Config(block_n=256, stages=2, a_transposed=a_transposed)
    spec = k90.spec(_p(b_transposed=b_transposed), cfg, H100)
    ptx = spio_compile(spec.source_text(), H100.arch + spec.arch_suffix, options=spec.options,
                       name=spec.source, scope=spec.specs, ptx=True).decode()  # fmt: skip
    flags = set(re.findall(r"wgmma\.mma_async[^;]*?p, 1, 1, (\d), (\d);", ptx, re.S))
    assert flags == {(str(int(a_transposed)), str(int(not b_transposed)))}, flags
    # The descriptors' constant fields: (lbo << 16) | (sbo << 32) | (swizzle B128 << 62).
    b128 = 1 << 62
    want_b = ((8192 >> 4) << 16 if not b_transposed else 1 << 16) | (64 << 32) | b128
    assert str(want_b) in ptx or hex(want_b)[2:] in ptx.lower(), "B's descriptor fields"


@pytest.mark.parametrize("block_n, stages", k90.TAIL_CONFIGS)
def test_tail_variants_keep_wgmma_batched(block_n, stages):
    """A split-tail variant (TAIL 1): no local memory, within the register budget, and (SASS,
    where cuobjdump is found) its wgmma batches unserialized (a split CTA's first k tile
    overwrites the accumulators as a whole tile's does: nothing zeroes them), the whole tiles'
    TMA store and the partials' 16-byte stores."""
    cfg = k90.MatmulSm90Config(block_n, stages, tail=True)
    cubin = compile_spec(k90.spec(_p(bias=True), cfg, H100), H100.arch)
    res = kernel_resources(cubin)["matmul_sm90"]
    assert res.local_bytes == 0 and res.registers <= k90.REGISTERS[block_n], (cfg, res)
    assert block_n < 128 or res.registers == 168, (cfg, res)  # rebalanced (setmaxnreg)
    if find_tool("cuobjdump") is not None:
        from spio.compiler.disasm import disassemble

        sass = disassemble(cubin)
        hgmma = re.findall(r"HGMMA\.[^;]*;", sass)
        assert hgmma and sum("gsb0" not in h for h in hgmma) >= len(hgmma) // 2, cfg
        assert "UTMASTG.2D" in sass and "STG.E.128" in sass, cfg


NO_CUOBJDUMP = find_tool("cuobjdump") is None
needs_cuobjdump = pytest.mark.skipif(
    NO_CUOBJDUMP, reason="needs cuobjdump (CUDA toolkit, on PATH or CUDA_HOME)"
)
# What only the cluster kernel has: the multicast copy of half of B into both CTAs, the remote
# arrival on the peer's `empty` barrier (mapa + mbarrier.arrive.release.cluster), the cluster
# barrier's arrive / wait, and the trap for a launch that is not a cluster of two.
CLUSTER_OPS = (
    "UTMALDG.2D.MULTICAST", "SYNCS.ARRIVE.TRANS64.RED", "UCGABAR_ARV", "UCGABAR_WAIT", "BPT.TRAP",
)  # fmt: skip


@needs_cuobjdump
@pytest.mark.parametrize("b_transposed", [True, False])
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("cluster_m", k90.CLUSTER_MS)
@pytest.mark.parametrize("block_n", k90.BLOCK_NS)
def test_sass_has_wgmma_tma_and_barriers(block_n, cluster_m, persistent, b_transposed):
    from spio.compiler.disasm import disassemble

    if cluster_m > 1 and not b_transposed:
        pytest.skip("a row-major B runs without clusters")
    cfg = k90.MatmulSm90Config(block_n, stages=2, cluster_m=cluster_m, persistent=persistent)
    p = _p(b_transposed=b_transposed)
    sass = disassemble(compile_spec(k90.spec(p, cfg, H100), H100.arch))
    assert re.search(rf"HGMMA\.64x{block_n}x16\.F32", sass), sass[:3000]
    for op in ("UTMALDG.2D", "SYNCS.ARRIVE.TRANS64", "SYNCS.PHASECHK.TRANS64.TRYWAIT"):
        assert op in sass, op
    assert not re.search(r"\b(STL|LDL)\b", sass), "local memory traffic"
    # The wgmma of a slot are one batch: only its last waits on the scoreboard (gsb0). When
    # ptxas serializes them (C7515: every HGMMA with gsb0, a wait after each), the tensor cores
    # idle between k-steps: seen once when the TMA-store variants zeroed the accumulators.
    hgmma = re.findall(r"HGMMA\.[^;]*;", sass)
    assert sum("gsb0" not in h for h in hgmma) >= len(hgmma) // 2, (
        "wgmma serialized:\n" + "\n".join(hgmma)
    )
    # The TMA-store epilogue (128- and 256-wide tiles) stores C by UTMASTG, the others by STG.
    assert ("UTMASTG.2D" in sass) == k90.stores_by_tma(cfg), "the epilogue's stores"
    # 128- and 256-wide tiles (one CTA an SM) move registers from the producer warpgroup to the
    # consumers (setmaxnreg: 40 and 232 a thread); 64-wide ones (two CTAs) keep the launch's.
    rebalance = re.findall(r"USETMAXREG\.(\w+)\.CTAPOOL[^;]*?(0x[0-9a-f]+)\s*;", sass)
    if block_n >= 128:
        assert sorted(rebalance) == [("DEALLOC", "0x28"), ("TRY_ALLOC", "0xe8")], rebalance
    else:
        assert rebalance == [], rebalance
    # A row-major B: one box per 64-wide block of the slot (A's box + block_n / 64).
    loads = len(re.findall(r"UTMALDG\.2D", sass))
    assert b_transposed or loads >= 1 + block_n // 64, loads
    if cluster_m == 1:
        for op in CLUSTER_OPS:
            assert op not in sass, f"plain kernel has {op}"
    else:
        for op in CLUSTER_OPS:
            assert op in sass, f"{op} missing"
        # B's half multicast, A's box a plain copy.
        assert re.search(r"UTMALDG\.2D \[", sass), "the plain load of A"


@needs_cuobjdump
@pytest.mark.parametrize(
    "cfg",
    [
        k90.MatmulSm90Config(16, 6, split_k=8, swap_ab=True),
        k90.MatmulSm90Config(32, 4, swap_ab=True),
        k90.MatmulSm90Config(64, 6, split_k=2, swap_ab=True),
    ],
    ids=lambda c: c.label(),
)
def test_swapped_variants_run_the_narrow_wgmma_and_store_from_registers(cfg):
    """Swapped variants run wgmma m64 x block_n (HGMMA 64 x block_n), their batches
    unserialized, and store C (or a split's partials) from registers: STG, no UTMASTG, no local
    memory, within their register budget (two CTAs an SM)."""
    from spio.compiler.disasm import disassemble

    p = _p(bias=True)
    if cfg.split_k > 1:
        p = replace(p, out_dtype="float32", has_bias=False)  # the split variant `bound` loads
    cubin = compile_spec(k90.spec(p, cfg, H100), H100.arch)
    sass = disassemble(cubin)
    hgmma = re.findall(rf"HGMMA\.64x{cfg.block_n}x16\.F32[^;]*;", sass)
    assert hgmma and sum("gsb0" not in h for h in hgmma) >= len(hgmma) // 2, cfg
    assert "UTMASTG" not in sass and re.search(r"\bSTG\b", sass), cfg
    assert not re.search(r"\b(STL|LDL)\b", sass), "local memory traffic"
    res = kernel_resources(cubin)["matmul_sm90"]
    assert res.registers <= k90.REGISTERS[cfg.block_n] and k90.ctas_per_sm(cfg, H100) >= 1, res


def _cluster_dims(cubin: bytes) -> tuple[int, ...] | None:
    """The compile-time cluster shape the cubin declares (EIATTR_CTA_PER_CLUSTER, what the
    driver launches a __cluster_dims__ kernel with under plain cuLaunchKernel), None if none."""
    import tempfile

    tool = find_tool("cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        image = Path(tmp) / "kernel.cubin"
        image.write_bytes(cubin)
        out = subprocess.run([str(tool), "-elf", str(image)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    match = re.search(
        r"EIATTR_CTA_PER_CLUSTER\s+Format:\s+\S+\s+Value:\s+([0-9a-fx ]+)", out.stdout
    )
    if match is None:
        assert "EIATTR_EXPLICIT_CLUSTER" not in out.stdout
        return None
    assert "EIATTR_EXPLICIT_CLUSTER" in out.stdout
    return tuple(int(v, 16) for v in match.group(1).split())


@needs_cuobjdump
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("cluster_m", k90.CLUSTER_MS)
def test_cubin_declares_the_cluster(cluster_m, persistent):
    cfg = k90.MatmulSm90Config(block_n=128, stages=4, cluster_m=cluster_m, persistent=persistent)
    cubin = compile_spec(k90.spec(_p(), cfg, H100), H100.arch)
    assert _cluster_dims(cubin) == (None if cluster_m == 1 else (2, 1, 1))


# The plain kernel's SASS, pinned: adding clusters must leave every cluster_m 1 variant's code
# as it was. Digests of the instruction text (addresses and encodings dropped) per config and
# flag set, written by the NVRTC version named in the file (other versions skip the test).
GOLDEN = Path(__file__).resolve().parent / "data" / "matmul_sm90_sass.json"


def _plain_variants() -> list[tuple[str, MatmulParams, k90.MatmulSm90Config]]:
    out = []
    for flags in FLAGS:
        p = _p(*flags)
        for cfg in k90.configs(p, H100):
            if not (
                cfg.cluster_m > 1 or cfg.persistent or cfg.split_k > 1 or cfg.tail or cfg.swap_ab
            ):
                out.append((f"{p.dtype}->{p.out_dtype} bias={p.has_bias} {cfg.label()}", p, cfg))
    return out


def _sass_digest(p: MatmulParams, cfg: k90.MatmulSm90Config) -> str:
    """The SASS digest of a fresh compile: not through the disk cache, whose entry for the same
    key may come from another compiler build (a shared cache dir once held one whose code
    differed from this NVRTC's for the same key: the test pins this NVRTC's output)."""
    from spio.compiler import compile as nvrtc_compile
    from spio.compiler.disasm import disassemble

    spec = k90.spec(p, cfg, H100)
    cubin = nvrtc_compile(
        spec.source_text(),
        H100.arch + spec.arch_suffix,
        options=spec.options,
        name=spec.source,
        scope=spec.specs,
        cache=None,
    )
    sass = disassemble(cubin)
    code = [m.group(1).strip() for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+([^;]*;)", sass)]
    assert code, sass[:2000]
    return hashlib.sha256("\n".join(code).encode()).hexdigest()


def _write_golden() -> None:
    table = {
        "nvrtc": "{}.{}".format(*nvrtc_version()),
        "digests": {name: _sass_digest(p, cfg) for name, p, cfg in _plain_variants()},
    }
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(table['digests'])} digests to {GOLDEN}")


@needs_cuobjdump
def test_plain_kernel_sass_is_pinned():
    table = json.loads(GOLDEN.read_text())
    version = "{}.{}".format(*nvrtc_version())
    if table["nvrtc"] != version:
        pytest.skip(f"digests written by NVRTC {table['nvrtc']}, this is {version}")
    got = {name: _sass_digest(p, cfg) for name, p, cfg in _plain_variants()}
    changed = sorted(n for n in got if got[n] != table["digests"].get(n))
    assert set(got) == set(table["digests"]), "the plain config space changed; --write"
    assert not changed, (
        f"the plain (cluster_m 1) kernel's SASS changed for {changed}; if intended, rewrite "
        "with `python tests/host/kernels/test_matmul_sm90.py --write`"
    )


GXX = shutil.which("g++")


def _run_tile_checks(tmp_path: Path, header: str, decls: str, checks: list[str]) -> None:
    """Compiles `checks` (CHECK(expr, expected) lines of C++) against the generated `header`
    with the host C++ library, `decls` at file scope, runs them and asserts every one held."""
    body = "\n    ".join(checks)
    (tmp_path / "tiles.h").write_text(header)
    (tmp_path / "tiles.cpp").write_text(f"""
#include <cstdio>
struct uint4 {{ unsigned x, y, z, w; }};
#include "tiles.h"
{decls}
static int failures = 0;
#define CHECK(expr, expected) do {{ long long got_ = (expr); if (got_ != (expected)) {{ \\
    std::printf("FAIL %s = %lld, expected %lld\\n", #expr, got_, (long long)(expected)); \\
    ++failures; }} }} while (0)
int main() {{
    {body}
    if (failures == 0) std::printf("ok\\n");
    return failures != 0;
}}
""")
    include = Path(__file__).resolve().parents[3] / "spio" / "include"
    exe = tmp_path / "tiles"
    build = subprocess.run(
        [GXX, "-std=c++20", "-I", str(include), "-I", str(tmp_path), str(tmp_path / "tiles.cpp"),
         "-o", str(exe)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:] + header
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout[-3000:]


@pytest.mark.skipif(
    GXX is None, reason="needs g++ (the typed-dimension headers compile on the host)"
)
def test_typed_smem_tiles_are_the_tma_swizzle(tmp_path):
    """SmemA / SmemB, the kernel's typed rings, put chunk k8 of row m of slot s where the TMA
    128-byte swizzle does: s * rows * 8 + m * 8 + (k8 ^ (m % 8)) chunks (every point, on the
    host through the generated header and the C++ library)."""
    from spio.generators import generate

    cfg = k90.MatmulSm90Config(block_n=64, stages=2)
    tiles = k90.smem_tiles(cfg)
    header = generate(tiles, "matmul_sm90 tiles")
    checks = []
    for name, dim, rows in (("SmemA", "M", k90.BLOCK_M), ("SmemB", "N", cfg.block_n)):
        checks.append(f"static uint4 buf_{name}[{name}::storage_size()];")
        for s in range(cfg.stages):
            for m in range(rows):
                for k8 in range(8):
                    want = (s * rows + m) * 8 + (k8 ^ (m % 8))
                    checks.append(
                        f"CHECK({name}(buf_{name})[STAGE({s})][{dim}({m})][K8({k8})].get()"
                        f" - buf_{name}, {want});"
                    )
    decls = "\n".join(c for c in checks if c.startswith("static"))
    _run_tile_checks(tmp_path, header, decls, [c for c in checks if not c.startswith("static")])


@pytest.mark.skipif(
    GXX is None, reason="needs g++ (the typed-dimension headers compile on the host)"
)
def test_typed_n_major_b_ring_is_the_tma_swizzle(tmp_path):
    """A row-major (K, N) B's ring, SmemB (STAGE, NB, KROW, N8): block nb of slot s holds 64 k
    rows of 8 chunks, chunk n8 of row k at ((s * blocks + nb) * 64 + k) * 8 + (n8 ^ (k % 8)),
    what a TMA box of 64 x 64 with the 128-byte swizzle writes at the block's start."""
    from spio.generators import generate

    cfg = k90.MatmulSm90Config(block_n=128, stages=2)
    header = generate(k90.smem_tiles(cfg, b_transposed=False), "matmul_sm90 n-major tiles")
    blocks = cfg.block_n // 64
    checks = []
    for s in range(cfg.stages):
        for nb in range(blocks):
            for k in range(64):
                for n8 in range(8):
                    want = ((s * blocks + nb) * 64 + k) * 8 + (n8 ^ (k % 8))
                    checks.append(
                        f"CHECK(SmemB(buf)[STAGE({s})][NB({nb})][KROW({k})][N8({n8})].get() - buf,"
                        f" {want});"
                    )
    checks.append(
        f'static_assert(SmemB::storage_size() == {cfg.stages * blocks * 64 * 8}, "size");'
    )
    _run_tile_checks(tmp_path, header, "static uint4 buf[SmemB::storage_size()];", checks)


@pytest.mark.skipif(
    GXX is None, reason="needs g++ (the typed-dimension headers compile on the host)"
)
def test_typed_m_major_a_ring_is_the_tma_swizzle(tmp_path):
    """An A given as (K, M): SmemA (STAGE, MB, KROW, M8), block mb of slot s holds 64 k rows of 8
    chunks, chunk m8 of row k at ((s * 2 + mb) * 64 + k) * 8 + (m8 ^ (k % 8)), what a TMA box of
    64 x 64 with the 128-byte swizzle writes at the block's start; with a row-major B too (the
    two rings share the KROW dim)."""
    from spio.generators import generate

    cfg = k90.MatmulSm90Config(block_n=64, stages=2, a_transposed=True)
    header = generate(k90.smem_tiles(cfg, b_transposed=False), "matmul_sm90 m-major tiles")
    checks = []
    for s in range(cfg.stages):
        for mb in range(2):
            for k in range(64):
                for m8 in range(8):
                    want = ((s * 2 + mb) * 64 + k) * 8 + (m8 ^ (k % 8))
                    checks.append(
                        f"CHECK(SmemA(buf)[STAGE({s})][MB({mb})][KROW({k})][M8({m8})].get() - buf,"
                        f" {want});"
                    )
    checks.append(f'static_assert(SmemA::storage_size() == {cfg.stages * 2 * 64 * 8}, "size");')
    _run_tile_checks(tmp_path, header, "static uint4 buf[SmemA::storage_size()];", checks)


def test_transposed_a_launch_reads_k_by_m_boxes(monkeypatch):
    """An A given as (K, M): its map is (K, M) with the row stride `lda` in boxes of 64 k x 64 m;
    `launch` checks a's (K, M) shape and names an M that is not a multiple of 8."""
    import torch

    from spio.cuda import driver, tensor_map

    encoded: list[tuple] = []
    monkeypatch.setattr(driver, "tensor_map_encode_tiled", lambda *args: encoded.append(args)
                        or bytes(128))  # fmt: skip
    p = MatmulParams(296, 200, 72, "float16", "float16", b_transposed=True)
    cfg = k90.MatmulSm90Config(128, 3, a_transposed=True, tma_store=False)

    class Kernel:
        def bind(self, grid):
            return lambda args, stream: None

    k90.Sm90Launch(Kernel(), p, cfg, H100, lda=304)(
        _FakeTensor(0x30000), _FakeTensor(0x10000), _FakeTensor(0x20000), None, 0
    )
    want: list[tuple] = []
    monkeypatch.setattr(driver, "tensor_map_encode_tiled", lambda *args: want.append(args) or
                        bytes(128))  # fmt: skip
    tensor_map.tiled(0x10000, "float16", (72, 296), (304, 1), (64, 64), swizzle=128)
    tensor_map.tiled(0x20000, "float16", (200, 72), (72, 1), (128, 64), swizzle=128)
    assert encoded == want
    b = torch.empty(200, 72, dtype=torch.float16)
    c = torch.empty(296, 200, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"a must be a contiguous torch.float16 tensor of shape"):
        k90.launch(p, cfg, c, torch.empty(296, 72, dtype=torch.float16), b, device=H100)
    q = replace(p, m=297)
    with pytest.raises(ValueError, match=r"needs M % 8 == 0"):
        k90.launch(q, cfg, torch.empty(297, 200, dtype=torch.float16),
                   torch.empty(72, 297, dtype=torch.float16), b, device=H100)  # fmt: skip


def test_leading_dimensions_are_checked():
    """`lda` / `ldb` must cover the row (>= M / N), be a multiple of 8, and are taken only for an
    operand given (K, M) / (K, N): anything else is a ValueError before a map is encoded."""

    class Kernel:
        def bind(self, grid):
            return lambda args, stream: None

    p = MatmulParams(296, 200, 72, "float16", "float16", b_transposed=False)
    cfg = k90.MatmulSm90Config(128, 3)
    for kw in ({"ldb": 192}, {"ldb": 204}, {"lda": 296}):
        with pytest.raises(ValueError, match="must be a row stride of at least"):
            k90.Sm90Launch(Kernel(), p, cfg, H100, **kw)
    with pytest.raises(ValueError, match="lda=290 must be a row stride of at least 296"):
        k90.Sm90Launch(Kernel(), p, replace(cfg, a_transposed=True), H100, lda=290)


def test_row_major_b_launch_reads_k_by_n_boxes(monkeypatch):
    """A row-major (K, N) B: its map is (K, N) with the caller's row stride `ldb` (the op's
    padded N) in boxes of 64 k x 64 n; `launch` names an N that is not a multiple of 8."""
    import torch

    from spio.cuda import driver, tensor_map

    encoded: list[tuple] = []
    monkeypatch.setattr(driver, "tensor_map_encode_tiled", lambda *args: encoded.append(args)
                        or bytes(128))  # fmt: skip
    p = MatmulParams(300, 203, 72, "float16", "float16", b_transposed=False)

    class Kernel:
        def bind(self, grid):
            return lambda args, stream: None

    with pytest.raises(ValueError, match="tma_store needs C's rows in whole 16-byte units"):
        k90.Sm90Launch(Kernel(), p, k90.MatmulSm90Config(256, 3), H100, ldb=208)
    k90.Sm90Launch(Kernel(), p, k90.MatmulSm90Config(256, 3, tma_store=False), H100, ldb=208)(
        _FakeTensor(0x30000), _FakeTensor(0x10000), _FakeTensor(0x20000), None, 0
    )
    want: list[tuple] = []
    monkeypatch.setattr(driver, "tensor_map_encode_tiled", lambda *args: want.append(args) or
                        bytes(128))  # fmt: skip
    tensor_map.tiled(0x10000, "float16", (300, 72), (72, 1), (k90.BLOCK_M, 64), swizzle=128)
    tensor_map.tiled(0x20000, "float16", (72, 203), (208, 1), (64, 64), swizzle=128)
    assert encoded == want  # N = 203: C's rows are not 16-byte units, no C map
    a = torch.empty(300, 72, dtype=torch.float16)
    b = torch.empty(72, 203, dtype=torch.float16)
    c = torch.empty(300, 203, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"row-major \(K, N\) b needs N % 8 == 0"):
        k90.launch(p, k90.MatmulSm90Config(), c, a, b, device=H100)


class _FakeTensor:
    def __init__(self, address: int) -> None:
        self.address = address

    def data_ptr(self) -> int:
        return self.address


class _BindChecker:
    """A loaded kernel's stand-in: `bind` checks the grid and dependence it is bound with, and
    each launch appends (name, args, stream) to `launched`."""

    def __init__(self, name, grid, dependent, launched: list) -> None:
        self.name, self.grid, self.dependent, self.launched = name, grid, dependent, launched

    def bind(self, grid, dependent=False):
        assert (grid, dependent) == (self.grid, self.dependent), self.name
        return lambda args, stream: self.launched.append((self.name, args, stream))


def test_bound_launch_encodes_each_address_once(monkeypatch):
    """Sm90Launch passes the driver what `tensor_map.tiled` would for A (M, K) and B (N, K), once
    per operand address (a second call at the same addresses encodes nothing), drops the oldest
    address past MAP_CACHE, and launches with the maps' bytes and (m, n, k, raster)."""
    from spio.cuda import driver, tensor_map

    encoded: list[tuple] = []

    def fake_encode(*args):
        encoded.append(args)
        return bytes([len(encoded)]) * 128

    monkeypatch.setattr(driver, "tensor_map_encode_tiled", fake_encode)
    p = MatmulParams(300, 200, 72, "bfloat16", "float32", b_transposed=True, has_bias=True)
    cfg = k90.MatmulSm90Config(block_n=256, stages=3, raster=4)

    class Kernel:
        def bind(self, grid):
            assert grid == k90.grid(p, cfg, H100)
            return lambda args, stream: launched.append((args, stream))

    launched: list = []
    run = k90.Sm90Launch(Kernel(), p, cfg, H100)
    a, b, c, bias = _FakeTensor(0x10000), _FakeTensor(0x20000), _FakeTensor(0x30000), object()
    run(c, a, b, bias, 7)
    run(c, a, b, bias, 7)
    # The reference: what tiled() hands the driver for the same tensors.
    want = []
    monkeypatch.setattr(driver, "tensor_map_encode_tiled", lambda *args: want.append(args) or
                        bytes(128))  # fmt: skip
    tensor_map.tiled(0x10000, "bfloat16", (300, 72), (72, 1), (k90.BLOCK_M, 64), swizzle=128)
    tensor_map.tiled(0x20000, "bfloat16", (200, 72), (72, 1), (256, 64), swizzle=128)
    # C (fp32) for the TMA-store epilogue: boxes of 64 rows x 128 bytes.
    tensor_map.tiled(0x30000, "float32", (300, 200), (200, 1), (64, 32), swizzle=128)
    assert encoded == want
    a_map, b_map, c_map = bytes([1]) * 128, bytes([2]) * 128, bytes([3]) * 128
    assert launched == [((c, a_map, b_map, c_map, bias, 300, 200, 72, 4), 7)] * 2

    monkeypatch.setattr(driver, "tensor_map_encode_tiled", fake_encode)
    encoded.clear()
    for i in range(k90.Sm90Launch.MAP_CACHE + 1):  # new A addresses: the first one is dropped
        run(c, _FakeTensor(0x100000 + 16 * i), b, None, 0)
    assert len(encoded) == k90.Sm90Launch.MAP_CACHE + 1
    run(c, _FakeTensor(0x100000), b, None, 0)  # dropped: encoded again
    run(c, _FakeTensor(0x100000 + 16 * k90.Sm90Launch.MAP_CACHE), b, None, 0)  # kept
    assert len(encoded) == k90.Sm90Launch.MAP_CACHE + 2
    assert launched[-1][0][4] is c  # no bias: C stands in for the unused pointer


def test_cluster_launch_halves_the_b_box_and_pads_the_grid(monkeypatch):
    """cluster_m 2: each CTA copies half of the B tile (multicast to both), so B's map has a
    box of block_n / 2 rows; A's is unchanged; the grid is padded to pairs of M tiles (3 -> 4)."""
    from spio.cuda import driver, tensor_map

    encoded: list[tuple] = []
    monkeypatch.setattr(driver, "tensor_map_encode_tiled", lambda *args: encoded.append(args)
                        or bytes(128))  # fmt: skip
    p = MatmulParams(300, 200, 72, "bfloat16", "float32", b_transposed=True, has_bias=True)
    cfg = k90.MatmulSm90Config(block_n=256, stages=3, raster=4, cluster_m=2)
    grids: list = []

    class Kernel:
        def bind(self, grid):
            grids.append(grid)
            return lambda args, stream: None

    k90.Sm90Launch(Kernel(), p, cfg, H100)(_FakeTensor(0x30000), _FakeTensor(0x10000),
                                           _FakeTensor(0x20000), None, 0)  # fmt: skip
    assert grids == [(4, 1, 1)]
    # Persistent: no more CTAs than the SMs hold (8192 x 8192: 64 x 32 tiles of 128 x 256).
    big = MatmulParams(8192, 8192, 8192, b_transposed=True)
    for cluster_m in k90.CLUSTER_MS:
        pcfg = k90.MatmulSm90Config(256, 4, cluster_m=cluster_m, persistent=True)
        k90.Sm90Launch(Kernel(), big, pcfg, H100)
        assert grids[-1] == (H100.sm_count, 1, 1) == k90.grid(big, pcfg, H100)
    want: list[tuple] = []
    monkeypatch.setattr(driver, "tensor_map_encode_tiled", lambda *args: want.append(args) or
                        bytes(128))  # fmt: skip
    tensor_map.tiled(0x10000, "bfloat16", (300, 72), (72, 1), (k90.BLOCK_M, 64), swizzle=128)
    tensor_map.tiled(0x20000, "bfloat16", (200, 72), (72, 1), (128, 64), swizzle=128)
    tensor_map.tiled(0x30000, "float32", (300, 200), (200, 1), (64, 32), swizzle=128)
    assert encoded == want


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/host/kernels/test_matmul_sm90.py --write")
    _write_golden()


def test_launch_names_a_misaligned_operand():
    """A or B not 16-byte aligned (TMA's rule) is a ValueError naming the operand and the fix,
    before anything reaches the driver."""
    import torch

    p = MatmulParams(16, 8, 64, "float16", "float16", b_transposed=True)
    cfg = k90.heuristic(p, H100)
    a = torch.empty(16 * 64 + 1, dtype=torch.float16)[1:].view(16, 64)  # 2 bytes off
    b = torch.empty(8, 64, dtype=torch.float16)
    c = torch.empty(16, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"a must start 16-byte aligned.*a\.clone\(\)"):
        k90.launch(p, cfg, c, a, b, device=H100)


def test_split_launch_writes_partials_then_sums_them(monkeypatch):
    """With split_k > 1, Sm90Launch runs the main kernel on a (split_k, M, N) fp32 workspace
    (its bias slot unused) over a (tiles, split_k) grid, then the sum as a dependent launch
    (PDL) reading that workspace into C with the bias; a plain config refuses a sum kernel."""
    import torch

    from spio.cuda import driver

    monkeypatch.setattr(driver, "tensor_map_encode_tiled", lambda *args: bytes(128))
    p = MatmulParams(16, 200, 4096, "float16", "float16", b_transposed=True, has_bias=True)
    cfg = k90.MatmulSm90Config(block_n=128, stages=6, split_k=4)
    launched: list = []

    rcfg = sk.config_for(p, cfg.split_k)
    assert rcfg == sk.SplitSumConfig(4, 4)  # N % 4 == 0: float4 (N = 202 below: scalar)
    main = _BindChecker("main", (2, 4, 1), False, launched)
    run = k90.Sm90Launch(main, p, cfg, H100, _BindChecker("sum", sk.grid(p, rcfg), True, launched))
    c, bias = torch.empty(16, 200, dtype=torch.float16), object()
    # Stream 5 is the current one; on another, the workspace is recorded on the launch stream.
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: SimpleNamespace(
        cuda_stream=5))  # fmt: skip
    monkeypatch.setattr(torch.cuda, "ExternalStream", lambda handle, device=None: ("ext", handle))
    recorded: list = []
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda t, s: recorded.append(s))
    run(c, _FakeTensor(0x10000), _FakeTensor(0x20000), bias, 5)
    assert recorded == []
    run(c, _FakeTensor(0x10000), _FakeTensor(0x20000), bias, 9)
    assert recorded == [("ext", 9)]
    del launched[2:]
    (name1, args1, s1), (name2, args2, s2) = launched
    ws = args1[0]
    assert (name1, name2, s1, s2) == ("main", "sum", 5, 5)
    assert ws.dtype == torch.float32 and ws.shape == (4 * 16 * 200,) and args1[3] is ws
    assert args1[4:] == (16, 200, 4096, cfg.raster)
    assert args2[0] is c and args2[1] is ws and args2[2] is bias and args2[3:] == (200, 3200)
    # The caller's workspace (the op's plan passes one): used as is, no stream query.
    assert run.workspace == (4 * 16 * 200,)
    given = torch.empty(run.workspace, dtype=torch.float32)
    monkeypatch.setattr(torch.cuda, "current_stream", None)
    launched.clear()
    run(c, _FakeTensor(0x10000), _FakeTensor(0x20000), bias, 9, given)
    (n1, main_args, s1), (n2, sum_args, s2) = launched
    assert (n1, n2, s1, s2) == ("main", "sum", 9, 9)
    assert main_args[0] is given and sum_args[0] is c and sum_args[1] is given
    assert recorded == [("ext", 9)]
    plain = k90.Sm90Launch(
        _BindChecker("main", (2, 1, 1), False, launched), p, replace(cfg, split_k=1), H100
    )
    assert plain.workspace is None
    with pytest.raises(ValueError, match="needs the second pass's kernel exactly when"):
        k90.Sm90Launch(main, p, cfg, H100)
    with pytest.raises(ValueError, match="needs the second pass's kernel exactly when"):
        k90.Sm90Launch(
            main, p, k90.MatmulSm90Config(), H100, _BindChecker("sum", (1, 1, 1), True, launched)
        )
    assert sk.config_for(replace(p, n=202), cfg.split_k) == sk.SplitSumConfig(4, 1)


def test_swapped_launch_maps_b_as_the_kernels_a(monkeypatch):
    """A swapped config (`swap_ab`): the kernel's A map is over B (N, K) in 128-row boxes, its B
    map over A (M, K) in block_n-row boxes, its problem (N, M, K); the grid counts C^T's tiles
    (split: x split_k)."""
    import torch

    from spio.cuda import driver

    encoded: list = []
    monkeypatch.setattr(driver, "tensor_map_encode_tiled", lambda *args: encoded.append(args)
                        or bytes(128))  # fmt: skip
    p = MatmulParams(16, 1000, 4096, "bfloat16", "bfloat16", b_transposed=True)
    cfg = k90.MatmulSm90Config(16, 6, swap_ab=True)
    launched: list = []
    run = k90.Sm90Launch(_BindChecker("main", (8, 1, 1), False, launched), p, cfg, H100)
    c = torch.empty(16, 1000, dtype=torch.bfloat16)
    run(c, _FakeTensor(0x10000), _FakeTensor(0x20000), None, 3)
    (b_map, a_map) = encoded  # the kernel's A (the product's B) first
    # (dtype, address, dims, strides, box, ...), dims and box innermost first
    assert b_map[1] == 0x20000 and b_map[2] == (4096, 1000) and b_map[4] == (64, 128), b_map
    assert a_map[1] == 0x10000 and a_map[2] == (4096, 16) and a_map[4] == (64, 16), a_map
    ((_, args, _),) = launched
    assert args[0] is c and args[4:] == (1000, 16, 4096, cfg.raster)
    split = replace(cfg, split_k=4)
    assert k90.grid(p, split, H100) == (8, 4, 1) and split.tiles(p) == (8, 1)
    # Split: the swapped kernel writes slices laid out as C, which the usual sum reads.
    launched.clear()
    total = 16 * 1000
    sum_grid = sk.grid(p, sk.config_for(p, 4))
    run = k90.Sm90Launch(
        _BindChecker("main", (8, 4, 1), False, launched), p, split, H100,
        _BindChecker("sum", sum_grid, True, launched),
    )  # fmt: skip
    ws = torch.empty(run.workspace, dtype=torch.float32)
    assert run.workspace == (4 * total,)
    run(c, _FakeTensor(0x10000), _FakeTensor(0x20000), None, 3, ws)
    (_, main_args, _), (_, sum_args, _) = launched
    assert main_args[0] is ws and main_args[4:] == (1000, 16, 4096, cfg.raster)
    assert sum_args[:2] == (c, ws) and sum_args[3:] == (1000, total)
    assert k90.grid(replace(p, m=40), replace(cfg, block_n=32), H100) == (8 * 2, 1, 1)


def test_tail_plan_splits_only_the_partial_last_wave():
    """`tail_plan`: the whole waves' tiles run whole; each tile of the partial last wave splits
    into as many CTAs as fill its slots (at most TAIL_MAX_SPLITS, each >= TAIL_MIN_K_TILES k
    tiles); no tail for whole waves, less than one wave, a non-tail config, or short K."""
    slots = H100.sm_count  # one 128 x 256 (or 128 x 128 with 6 slots) CTA per SM

    def plan(m, n, k, block_n=256, stages=4, tail=True):
        p = MatmulParams(m, n, k, "float16", "float16", b_transposed=True)
        return k90.tail_plan(p, k90.MatmulSm90Config(block_n, stages, tail=tail), H100)

    tiles = 7 * 20  # 777 x 5000: 7 x 20 tiles of 128 x 256, one wave and 8 tiles
    assert plan(777, 5000, 3000) == (slots, min(slots // (tiles - slots), k90.TAIL_MAX_SPLITS))
    assert plan(12608, 768, 3072) == (2 * slots, slots // (99 * 3 - 2 * slots))  # 33 tail tiles
    assert plan(777, 5000, 3000, tail=False) == (tiles, 1)
    assert plan(4096, 4096, 4096) == (512, 1)  # 3 waves + 116 tiles: too many to split
    assert plan(1024, 1024, 4096) == (32, 1)  # fewer tiles than one wave: split-K's domain
    assert plan(128 * slots, 512, 4096) == (2 * slots, 1)  # whole waves
    assert plan(777, 5000, 192) == (tiles, 1)  # 3 k tiles: not 2 splits of >= 2
    assert plan(777, 5000, 256) == (slots, 2)
    with pytest.raises(ValueError, match="tail runs plain 128- or 256-wide CTAs"):
        k90.MatmulSm90Config(64, 4, tail=True)
    for other in ({"cluster_m": 2}, {"persistent": True}, {"split_k": 2}):
        with pytest.raises(ValueError, match="tail runs plain"):
            k90.MatmulSm90Config(256, 4, tail=True, **other)
    with pytest.raises(ValueError, match="tail must be a bool"):
        k90.MatmulSm90Config(tail=1)  # type: ignore[arg-type, unused-ignore]
    assert k90.MatmulSm90Config(256, 4, tail=True).label() == "n256 s4 t"


def test_tail_launch_runs_whole_tiles_then_sums_the_tail(monkeypatch):
    """A tail config: the main kernel (the plain variant's arguments, then the workspace,
    dp_tiles and splits) over dp_tiles + tail tiles x splits CTAs, then the tail's sum (PDL) on
    the same workspace into C with the bias; `bound` runs the plain variant where the problem
    has no tail, and loads the sum where it has one."""
    from spio.cuda import driver

    monkeypatch.setattr(driver, "tensor_map_encode_tiled", lambda *args: bytes(128))
    p = MatmulParams(777, 5000, 3000, "float16", "float16", b_transposed=True, has_bias=True)
    cfg = k90.MatmulSm90Config(block_n=256, stages=4, tail=True)
    dp_tiles, splits = k90.tail_plan(p, cfg, H100)
    tail_tiles = 140 - dp_tiles
    launched: list = []

    main = _BindChecker("main", (dp_tiles + tail_tiles * splits, 1, 1), False, launched)
    sum_grid = (tail_tiles * 256 // 8, 1, 1)
    run = k90.Sm90Launch(main, p, cfg, H100, _BindChecker("sum", sum_grid, True, launched))
    assert run.workspace == (tail_tiles * splits * 128 * 256,)
    c, bias = _FakeTensor(0x30000), object()
    given = SimpleNamespace()
    run(c, _FakeTensor(0x10000), _FakeTensor(0x20000), bias, 5, given)
    (n1, main_args, s1), (n2, sum_args, s2) = launched
    assert (n1, n2, s1, s2) == ("main", "sum", 5, 5)
    assert main_args[0] is c and main_args[4] is bias  # c, a_map, b_map, c_map, bias
    assert main_args[5:] == (777, 5000, 3000, cfg.raster, given, dp_tiles, splits)
    assert sum_args == (c, given, bias, 777, 5000, dp_tiles, splits, cfg.raster)
    # C's rows not whole 16-byte units (odd N): the register epilogue's arguments, no C map.
    q = replace(p, n=4999)
    qcfg = replace(cfg, tma_store=False)
    qdp, qsplits = k90.tail_plan(q, qcfg, H100)
    qmain = _BindChecker("main", (qdp + (140 - qdp) * qsplits, 1, 1), False, launched)
    qrun = k90.Sm90Launch(qmain, q, qcfg, H100, _BindChecker("sum", sum_grid, True, launched))
    launched.clear()
    qrun(c, _FakeTensor(0x10000), _FakeTensor(0x20000), bias, 5, given)
    (_, main_args, _), (_, sum_args, _) = launched
    assert main_args[0] is c and main_args[3] is bias  # c, a_map, b_map, bias
    assert main_args[4:] == (777, 4999, 3000, cfg.raster, given, qdp, qsplits)
    assert sum_args == (c, given, bias, 777, 4999, qdp, qsplits, cfg.raster)
    monkeypatch.setattr(k90, "TAIL_MAX_SPLITS", ts.MAX_SPLITS + 1)
    # 4 tail tiles would take 33 splits: TAIL_MAX_SPLITS past the sum's MAX_SPLITS is refused.
    with pytest.raises(ValueError, match="the sum takes at most"):
        k90.Sm90Launch(
            main,
            replace(p, m=512, n=8700, k=12000),
            cfg,
            H100,
            _BindChecker("sum", sum_grid, True, launched),
        )
    monkeypatch.undo()
    with pytest.raises(ValueError, match="block_n must be 128 or 256"):
        ts.TailSumConfig(64)
    with pytest.raises(ValueError, match="has no split tail"):
        k90.Sm90Launch(
            main, replace(p, m=128 * 132), cfg, H100, _BindChecker("sum", sum_grid, True, launched)
        )
    keys: list = []

    class Cache:
        def get(self, kdef, params, config, dev):
            keys.append((kdef.name, config))
            return SimpleNamespace(bind=lambda grid, dependent=False: lambda *a: None)

    k90.bound(p, cfg, H100, Cache())
    assert keys == [
        ("matmul_tail_sum", ts.TailSumConfig(256)),
        ("matmul_sm90", replace(cfg, raster=1)),
    ]
    keys.clear()
    k90.bound(replace(p, m=128 * 132), cfg, H100, Cache())  # whole waves: the plain variant
    assert keys == [("matmul_sm90", replace(cfg, raster=1, tail=False))]


def test_split_main_kernel_is_one_variant_for_every_output_and_bias():
    """The split main kernel writes fp32 partials without the bias whatever p's output type and
    bias, so `bound` loads one variant for all of them; the sum's variant keeps p's."""
    keys: list = []

    class Cache:
        def get(self, kdef, params, cfg, dev):
            keys.append((kdef.name, params, cfg))
            return SimpleNamespace(bind=lambda grid, dependent=False: None)

    cfg = k90.MatmulSm90Config(block_n=128, stages=6, split_k=4)
    for out, bias in (("float16", False), ("float32", True)):
        k90.bound(MatmulParams(16, 256, 4096, "float16", out, True, bias), cfg, H100, Cache())
    mains = {params for name, params, _ in keys if name == "matmul_sm90"}
    sums = {params for name, params, _ in keys if name == "matmul_splitk_reduce"}
    assert mains == {MatmulParams(1, 1, 8, "float16", "float32", True, False)}
    assert len(sums) == 2
    # tma_store is moot for split-K: `bound` loads it off, one variant either way.
    want = replace(cfg, raster=1, tma_store=False)
    assert all(c == want for name, _, c in keys if name == "matmul_sm90")


@pytest.mark.parametrize(
    "m, n, k, label",
    [
        (8192, 8192, 8192, "n256 s3 c2 p"),  # many waves of the widest tile: large_pick
        (777, 5000, 3000, "n256 s4 t"),  # one wave and 8 tiles: the 8 split 16 ways along K
        (12608, 768, 3072, "n256 s4 t"),  # two waves and 33 tiles (4 splits)
        (5000, 5000, 5000, "n256 s3 c2 p"),  # 6 waves before the tail (TAIL_MAX_WAVES): large
        (1152, 4608, 1152, "n128 s6"),  # a tail predicted to save under 8%: TAIL_MARGIN
        (4096, 4096, 4096, "n256 s3 c2 p"),  # 3 waves, 116 tiles: too many to split; large
        (512, 4096, 4096, "n128 s6"),  # 128 tiles of 128 x 128: one wave
        (256, 1024, 1024, "n128 s6"),  # host-bound as called: split-K would cost more host time
        (1024, 1024, 8192, "n128 s6 k2"),  # 64 tiles x 2: one wave of half the k tiles
        (512, 1024, 16384, "n128 s6 k4"),  # the previous rule's worst: 2.5-2.8x the best
        (129, 4096, 4096, "n128 s6 k2"),  # a second row of tiles with one row in it
        (16, 4096, 4096, "n16 s6 k4 sw"),  # decode: swapped, 32 tiles x 4 splits
        (16, 1024, 2112, "n16 s6 k4 sw"),  # 33 k tiles: 8 splits of 5 would leave one empty
        (64, 11008, 4096, "n64 s6 sw"),  # 86 tiles: one an SM, no split
        (65, 4096, 4096, "n128 s6 k4"),  # past SWAP_MAX_M
        (16, 64, 4096, "n64 s6 k8"),  # N <= 64: split_choice
        (300, 60, 64, "n64 s4"),
    ],
)
def test_heuristic_picks_by_predicted_waves(m, n, k, label):
    """The heuristic's picks (most at yardstick shapes; the N <= 64 ones follow split_choice; a
    plain 256-wide pick of two or more waves becomes LARGE_PICK): a refit that moves them is a
    change to look at, not noise. 256 x 1024 x 1024 stays unsplit for the host's sake though
    split-K's kernel is 1.26-1.31x faster."""
    assert k90.heuristic(MatmulParams(m, n, k, b_transposed=True), H100).label() == label


def test_heuristic_candidates_are_configs_of_the_space():
    p = MatmulParams(4096, 4096, 4096, b_transposed=True)
    space = k90.configs(p, H100)
    assert all(c in space for c in k90.HEURISTIC_CANDIDATES + k90.TAIL_CANDIDATES)
    assert {k90.cost_family(c) for c in k90.HEURISTIC_CANDIDATES} == set(k90.WAVE_COST_US)


def test_cost_model_counts_waves_of_resident_ctas():
    """128 x 256 tiles: one CTA per SM; 8192^2 is 64 x 32 tiles = 2048 CTAs = 16 waves on 132
    SMs (15.5 rounded up), each CTA 128 k tiles; split-K 4 quarters the k tiles per CTA."""
    C = k90.MatmulSm90Config
    p = MatmulParams(8192, 8192, 8192, b_transposed=True)
    assert k90.cost_terms(p, C(256, 4), H100) == (16, 128)
    q = MatmulParams(16, 4096, 4096, b_transposed=True)
    assert k90.cost_terms(q, C(128, 6, split_k=4), H100) == (1, 16)
    assert k90.split_mb(q, C(128, 6, split_k=4)) == 4 * 16 * 4096 * 4 / 1e6


def test_tail_cost_is_whole_waves_then_one_short_wave():
    """A split tail's predicted time: its whole waves at the plain config's cost, one wave of
    ceil(k tiles / splits) k tiles, and split-K's D; without a tail, the plain config's."""
    C = k90.MatmulSm90Config
    p = MatmulParams(777, 5000, 3000, b_transposed=True)
    a, b = k90.WAVE_COST_US[(256, 4, False)]
    dp_tiles, splits = k90.tail_plan(p, C(256, 4, tail=True), H100)
    assert (dp_tiles, splits) == (132, 16)
    want = (47 * a + b) + (3 * a + b) + k90.SPLIT_COST_US[1]
    assert k90.predicted_us(p, C(256, 4, tail=True), H100) == pytest.approx(want)
    assert k90.predicted_us(p, C(256, 4), H100) == pytest.approx(2 * (47 * a + b))
    q = MatmulParams(4096, 4096, 4096, b_transposed=True)
    assert k90.predicted_us(q, C(256, 4, tail=True), H100) == k90.predicted_us(q, C(256, 4), H100)
    assert k90.cost_pick(p, H100, tails=False).label() == "n256 s4"


def test_split_workspace_is_capped(monkeypatch):
    """A split-K pick takes at most SPLIT_WORKSPACE_MAX_MB of fp32 partials per call: at 512 x
    4352 x 32768 the model would split 8 ways (71 MB) without the cap, 4 ways (36 MB) with it."""
    p = MatmulParams(512, 4352, 32768, b_transposed=True)
    capped = k90.heuristic(p, H100)
    assert capped.split_k == 4 and k90.split_mb(p, capped) <= k90.SPLIT_WORKSPACE_MAX_MB
    monkeypatch.setattr(k90, "SPLIT_WORKSPACE_MAX_MB", float("inf"))
    assert k90.split_mb(p, k90.heuristic(p, H100)) > 64


def test_ranked_is_the_cost_models_order_for_autotune():
    """`ranked` (what SPIO_AUTOTUNE measures): the heuristic's pick first, then other valid
    candidates by predicted time as called, then where 256-wide tiles fill more than one wave the
    PERSISTENT_CANDIDATES (the cluster one for B as (N, K) only); at most AUTOTUNE_CANDIDATES;
    a tail only where the problem has one; no split-K or tail where the plain pick is
    host-bound; a split-K decode pick keeps its split alternatives."""
    shapes = [(777, 5000, 3000), (4096, 4096, 4096), (333, 777, 1000), (16, 4096, 4096),
              (8, 64, 4096), (12608, 768, 3072), (1000, 1000, 1000)]  # fmt: skip
    for (m, n, k), dev, b_transposed in itertools.product(
        shapes, (H100, known_device("H200")), (True, False)
    ):
        p = MatmulParams(m, n, k, "float16", "float16", b_transposed=b_transposed)
        r = k90.ranked(p, dev)
        space = k90.configs(p, dev)
        assert r[0] == k90.heuristic(p, dev) and len(set(r)) == len(r), r
        assert 2 <= len(r) <= k90.AUTOTUNE_CANDIDATES and all(c in space for c in r), r
        assert all(k90.tail_plan(p, c, dev)[1] > 1 for c in r if c.tail), r
        tm, tn = k90.MatmulSm90Config(256).tiles(p)
        extra = [
            c
            for c in k90.PERSISTENT_CANDIDATES
            if tm * tn > dev.sm_count
            and (c.cluster_m == 1 or (b_transposed and tm >= 2))
            and c != r[0]
        ]
        assert bool(extra) == (m * n >= 777 * 5000), (m, n, k)  # the shapes above
        assert r[len(r) - len(extra) :] == extra, r
        r = r[: len(r) - len(extra)]

        def as_called(c, p=p, dev=dev):
            us = k90.predicted_us(p, c, dev)
            floor = k90.SPLIT_HOST_US if c.split_k > 1 or c.tail else k90.PLAIN_HOST_US
            return max(us, floor), us

        if not r[0].swap_ab:  # swapped picks: `swap_ranked` (below)
            assert r[1:] == sorted(r[1:], key=as_called), r
    host_bound = MatmulParams(333, 777, 1000, "float16", "float16")
    assert k90.predicted_us(host_bound, k90.heuristic(host_bound, H100), H100) < k90.SPLIT_HOST_US
    assert all(c.split_k == 1 and not c.tail for c in k90.ranked(host_bound, H100))
    decode = k90.ranked(MatmulParams(16, 4096, 4096, "float16", "float16"), H100)
    assert decode[0].split_k > 1 and sum(c.split_k > 1 for c in decode) >= 3, decode
    # Swapped: its other splits, unsplit, then the unswapped pick.
    swapped = k90.ranked(MatmulParams(16, 4096, 4096, "float16", "float16", True), H100)
    assert [c.label() for c in swapped] == [
        "n16 s6 k4 sw",
        "n16 s6 k8 sw",
        "n16 s6 k2 sw",
        "n16 s6 sw",
        "n128 s6 k4",
    ]
    assert any(
        c.tail for c in k90.ranked(MatmulParams(777, 5000, 3000, "float16", "float16"), H100)
    )


def test_the_op_selects_through_the_selector(tmp_path, caplog):
    """The op's sm_90 choice goes through the selector (`KernelDef.ranked`): the heuristic's
    config, neither persisted nor kept per shape, with no warning about a missing model; a
    persisted autotune winner (of the same code) is what it runs instead."""
    from spio.functional.matmul import kernel_choice
    from spio.select import default_selector
    from spio.select.basis import winner_basis
    from spio.settings import override

    p = MatmulParams(777, 5000, 3000, "float16", "float16")
    with override(cache_dir=tmp_path, autotune=False):
        default_selector().clear()
        try:
            assert kernel_choice(p, H100) == ("sm90", k90.heuristic(p, H100))
            assert ("matmul_sm90", p, H100.name) not in default_selector().sources
            assert not list(tmp_path.rglob("*.picks.json"))
            other = k90.ranked(p, H100)[1]
            default_selector().store.save_winner(k90.DEF, p, H100, winner_basis(k90.DEF, H100),
                                                 other)  # fmt: skip
            assert kernel_choice(p, H100) == ("sm90", other)
        finally:
            default_selector().clear()
    assert not [r for r in caplog.records if "no performance model" in r.getMessage()]
