"""matmul family on the host: params/config validation, config space, heuristic, NVRTC compiles of
sampled configs for sm_80 and sm_90 (exhaustive under `slow`), and the SASS of the heuristic
config (HMMA count per k tile, no local memory)."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spio.kernels import KERNELS
from spio.kernels import matmul as mm
from spio.kernels.matmul import MatmulConfig, MatmulParams
from spio.settings import settings
from spio.testing import sample

ARCHS = ("sm_80", "sm_90")
FLAGS = list(
    itertools.product(("float16", "bfloat16"), (False, True), (False, True), (False, True))
)  # dtype, fp32 out, b_transposed, bias


def _device(name: str):
    from spio.cuda import known_device

    return known_device(name)


def _compile(p: MatmulParams, cfg: MatmulConfig, arch: str) -> bytes:
    from spio.kernels.loader import compile_spec

    return compile_spec(mm.spec(p, cfg, _device("H100")), arch)


def _params(dtype="float16", fp32_out=False, b_transposed=False, bias=False, m=4096, n=4096):
    out = "float32" if fp32_out else dtype
    return MatmulParams(m, n, 4096, dtype, out, b_transposed=b_transposed, has_bias=bias)


# ---- params and config validation -----------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(m=0, n=8, k=8), ValueError, r"MatmulParams.m must be >= 1"),
        (dict(m=4, n=0, k=8), ValueError, r"MatmulParams.n must be >= 1"),
        (dict(m=4, n=8, k=12), ValueError, r"k must be a multiple of 8.*pad K with zeros to 16"),
        (dict(m=4, n=8, k=0), ValueError, r"MatmulParams.k must be >= 8"),
        (dict(m=4.0, n=8, k=8), TypeError, r"MatmulParams.m must be an int"),
        (dict(m=4, n=8, k=8, dtype="float32"), ValueError, r"dtype must be one of"),
        (dict(m=4, n=8, k=8, out_dtype="bfloat16"), ValueError, r"out_dtype must be the operand"),
        (dict(m=4, n=8, k=8, b_transposed=1), TypeError, r"b_transposed must be a bool"),
    ],
)
def test_params_rejects(kwargs, error, message):
    with pytest.raises(error, match=message):
        MatmulParams(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(block_k=16), r"block_k must be one of"),
        (dict(stages=5), r"stages must be 2, 3 or 4"),
        (dict(block_m=128, warps_m=3), r"warps \(3 x 2\) must divide"),
        (dict(block_m=256, warps_m=2), r"warp tile 128 x 64 .* at most 64"),
        (dict(block_m=64, block_n=64, warps_m=4, warps_n=4), r"warp tile 16 x 16|warps exceed"),
        (dict(block_m=256, block_n=256, warps_m=4, warps_n=4), r"16 warps exceed 8"),
        (dict(raster=0), r"raster must be >= 1"),
    ],
)
def test_config_rejects(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MatmulConfig(**kwargs)


def test_variant_and_bucket_drop_only_the_shape():
    p = MatmulParams(1000, 24, 40, "bfloat16", "float32", b_transposed=True, has_bias=True)
    q = MatmulParams(7, 4096, 11008, "bfloat16", "float32", b_transposed=True, has_bias=True)
    assert p.variant() == q.variant()
    assert (
        p.bucketed().m == 1024 and q.bucketed().m == 8 and MatmulParams(1, 8, 8).bucketed().m == 1
    )
    assert p.bucketed().n == p.n and p.bucketed().k == p.k


def test_stats():
    s = mm.stats(MatmulParams(3, 5, 8, "float16", "float32", has_bias=True))
    assert s.flops == 2 * 3 * 5 * 8
    assert s.bytes_moved == (3 * 8 + 8 * 5 + 5) * 2 + 3 * 5 * 4


def test_registered():
    assert KERNELS["matmul"] is mm.DEF
    assert mm.DEF.params_type is MatmulParams and mm.DEF.config_type is MatmulConfig


def test_sample_params_near_square_draws_hit_exact_cubes_and_aligned_sides():
    import random

    rng = random.Random(0)
    draws = [mm._near_square(rng) for _ in range(300)]
    cubes = [d for d in draws if d[0] == d[1] == d[2]]
    assert {d[0] for d in cubes} <= set(mm._SQUARE_BASES)
    assert 60 <= len(cubes) <= 140, len(cubes)  # about a third
    for m, n, k in draws:
        assert m % 64 == 0 and n % 64 == 0 and k % 8 == 0, (m, n, k)
        assert all(768 <= side <= 10240 for side in (m, n, k)), (m, n, k)
    # Through sample_params: every draw is valid params with configs on the H100, and exact
    # cubes of the bases no LLM-like shape has (1536, 3072, 6144) come up.
    h100 = _device("H100")
    params = [mm.sample_params(rng) for _ in range(300)]
    assert all(isinstance(p, MatmulParams) and mm.configs(p, h100) for p in params)
    assert any(p.m == p.n == p.k and p.m in (1536, 3072, 6144) for p in params)


# ---- config space and heuristic -----------------------------------------------------------


@pytest.mark.parametrize("gpu", ["H100", "A100"])
@pytest.mark.parametrize("out", ["float16", "float32"])
def test_configs_fit_the_device(gpu, out):
    dev = _device(gpu)
    p = MatmulParams(512, 512, 512, "float16", out)
    cfgs = mm.configs(p, dev)
    assert len(cfgs) == len(set(cfgs)) > 20
    for cfg in cfgs:
        assert cfg.smem(p) <= dev.max_smem_per_block_optin, cfg
        assert cfg.threads <= 256 and cfg.warp_m in (32, 64) and cfg.warp_n in (32, 64), cfg
    features = [mm.features(p, cfg, dev) for cfg in cfgs[:3]]
    assert all(list(f) == list(features[0]) for f in features)


@pytest.mark.parametrize("gpu", ["H100", "A100"])
@pytest.mark.parametrize(
    "m, n, k",
    [(1, 1, 8), (16, 4096, 4096), (1000, 255, 64), (8192, 8192, 8192), (8192, 11008, 4096)],
)
@pytest.mark.parametrize("out", ["bfloat16", "float32"])
def test_heuristic_is_a_listed_config(gpu, m, n, k, out):
    dev = _device(gpu)
    p = MatmulParams(m, n, k, "bfloat16", out)
    cfg = mm.heuristic(p, dev)
    assert cfg in mm.configs(p, dev)
    spec = mm.spec(p, cfg, dev)
    assert spec.block == (cfg.threads, 1, 1) and spec.smem == cfg.smem(p)
    assert mm.grid(p, cfg)[0] == cfg.tiles(p)[0] * cfg.tiles(p)[1]


def test_heuristic_big_tiles_for_big_problems_small_tiles_for_decode():
    dev = _device("H100")
    big = mm.heuristic(MatmulParams(8192, 8192, 8192), dev)
    assert (big.block_m, big.block_n) == (128, 256) and big.stages >= 3
    decode = mm.heuristic(MatmulParams(16, 4096, 4096), dev)
    assert decode.block_m * decode.block_n < big.block_m * big.block_n


def _assert_no_local_memory(image: bytes, cfg: MatmulConfig) -> None:
    from spio.compiler import kernel_resources

    res = kernel_resources(image)["spio_matmul"]
    assert res.local_bytes == 0, f"{cfg}: {res}"
    assert res.registers <= 255, f"{cfg}: {res}"


# ---- NVRTC compiles -----------------------------------------------------------------------

_COMPILE_LIMIT = 6  # per arch in CI: ~1 s of NVRTC each on 2 cores


def _sampled_configs(limit: int | None) -> list[MatmulConfig]:
    """Distinct compiled variants (raster is a runtime argument) for an H100, sampled."""
    p = _params()
    shapes = {
        (c.block_m, c.block_n, c.block_k, c.warps_m, c.warps_n, c.stages)
        for c in mm.configs(p, _device("H100"))
    }
    return sample([MatmulConfig(*c) for c in sorted(shapes)], limit)


# Indices into the sample (collection stays free of device lookups).
_COMPILE_COUNT = settings().max_test_params or _COMPILE_LIMIT


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("index", range(_COMPILE_COUNT))
def test_configs_compile(arch, index):
    cfgs = _sampled_configs(_COMPILE_COUNT)
    if index >= len(cfgs):
        pytest.skip(f"only {len(cfgs)} distinct configs")
    image = _compile(_params(), cfgs[index], arch)
    _assert_no_local_memory(image, cfgs[index])


@pytest.mark.parametrize("flags", sample(FLAGS, settings().max_test_params or 6), ids=str)
def test_flag_variants_compile(flags):
    p = _params(*flags)
    cfg = mm.heuristic(p, _device("H100"))
    _assert_no_local_memory(_compile(p, cfg, "sm_90"), cfg)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("flags", FLAGS, ids=str)
def test_every_variant_compiles(arch, flags):
    from spio.kernels.loader import compile_specs

    p = _params(*flags)
    cfgs = [
        c for c in _sampled_configs(None) if c.smem(p) <= _device("H100").max_smem_per_block_optin
    ]
    images = compile_specs([mm.spec(p, cfg, _device("H100")) for cfg in cfgs], arch)
    assert len(images) == len(cfgs)
    for image, cfg in zip(images, cfgs, strict=False):
        _assert_no_local_memory(image, cfg)


# ---- SASS ---------------------------------------------------------------------------------


def _cuobjdump() -> Path | None:
    """cuobjdump on PATH, in a CUDA toolkit, or from the nvidia-cuda-cuobjdump wheel."""
    from spio.compiler.locate import find_tool

    found = find_tool("cuobjdump")
    if found:
        return found
    for root in map(Path, sys.path):
        for hit in sorted(root.glob("nvidia/*/bin/cuobjdump")):
            return hit
    return None


def _sass(image: bytes, tmp_path: Path, *args: str) -> str:
    tool = _cuobjdump()
    if tool is None:
        pytest.skip(
            "needs cuobjdump (CUDA toolkit, or pip install nvidia-cuda-cuobjdump "
            "nvidia-cuda-nvdisasm)"
        )
    cubin = tmp_path / "matmul.cubin"
    cubin.write_bytes(image)
    env = dict(os.environ, PATH=f"{tool.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    run = subprocess.run([str(tool), *args, str(cubin)], capture_output=True, text=True, env=env)
    if run.returncode != 0 and "nvdisasm" in run.stderr:
        pytest.skip(f"cuobjdump needs nvdisasm: {run.stderr.strip()}")
    assert run.returncode == 0, run.stderr
    return run.stdout


def _main_loop(sass: str) -> list[str]:
    """Opcodes of the main loop: the backward branch whose body holds the most HMMA."""
    ins = []
    for line in sass.splitlines():
        m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*)", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2), m.group(3)))
    best: list[str] = []
    for addr, op, rest in ins:
        target = re.match(r"\s+0x([0-9a-f]+)", rest)
        if op == "BRA" and target and int(target.group(1), 16) < addr:
            body = [o for a, o, _ in ins if int(target.group(1), 16) <= a <= addr]
            if body.count("HMMA.16816.F32") > best.count("HMMA.16816.F32"):
                best = body
    return best


@pytest.mark.parametrize("b_transposed", [False, True])
def test_sass_of_the_heuristic_config(b_transposed, tmp_path):
    """The main loop issues MMA_M * MMA_N * K_STEPS HMMA.16816 and (MMA_M + MMA_N / 2) * K_STEPS
    LDSM.x4 per k tile per warp (the loop body appears once, or unrolled a whole number of times),
    one more k16 step of LDSM comes before it (the fragment double buffer), and nothing spills to
    local memory."""
    p = MatmulParams(8192, 8192, 8192, b_transposed=b_transposed)
    cfg = mm.heuristic(p, _device("H100"))
    image = _compile(p, cfg, "sm_90")
    sass = _sass(image, tmp_path, "-sass")
    k_steps = cfg.block_k // 16
    hmma_step = (cfg.warp_m // 16) * (cfg.warp_n // 8)
    ldsm_step = cfg.warp_m // 16 + cfg.warp_n // 16
    loop = _main_loop(sass)
    hmma = loop.count("HMMA.16816.F32")
    ldsm = sum(op.startswith("LDSM.16.M") and op.endswith(".4") for op in loop)
    assert hmma > 0 and hmma % (hmma_step * k_steps) == 0, f"{hmma} HMMA in the main loop"
    assert ldsm * hmma_step == hmma * ldsm_step, f"{ldsm} LDSM for {hmma} HMMA in the main loop"
    assert len(re.findall(r"\bHMMA\.16816\.F32\b", sass)) == hmma  # all mma's in the loop
    total_ldsm = len(re.findall(r"\bLDSM\.16\.M(T)?88\.4\b", sass))
    assert total_ldsm == ldsm + ldsm_step, f"{total_ldsm} LDSM, {ldsm} in the main loop"
    spills = re.findall(r"\b(STL|LDL)(\.\w+)*\b", sass)
    assert not spills, f"local memory traffic in the SASS: {len(spills)} STL/LDL"
    usage = _sass(image, tmp_path, "-res-usage")
    regs = int(re.search(r"REG:(\d+)", usage).group(1))
    assert regs <= 255 and re.search(r"STACK:0\b", usage), usage


# ---- the kernel's addressing assumption, on the generated types ----------------------------

_LAYOUT_CHECK = r"""
#include <cstdio>
struct uint4 { unsigned x, y, z, w; };
#include "matmul_smem.h"
// The kernel resolves one ldmatrix row address per k step and reaches the other mma tiles by
// adding 16-row steps, and one cp.async destination per thread whose other copies are a multiple
// of 8 rows away; that is only right if the swizzle key ignores row bits >= 3.
template <class T, class Row, class Col, int Rows, int Cols>
int check(const char* what) {
    static uint4 buf[T::storage_size()];
    auto t = T(buf);
    const long step = t[Row(8)].get() - t.get();
    int bad = 0;
    for (int r = 0; r + 8 < Rows; ++r)
        for (int c = 0; c < Cols; c += 8)
            if (t[Row(r + 8)][Col(c)].get() - t[Row(r)][Col(c)].get() != step) {
                if (bad++ < 3) std::printf("%s: row %d col %d\n", what, r, c);
            }
    return bad;
}
int main() {
    int bad = check<SmemA, M, K, BLOCK_M, BLOCK_K>("A");
    bad += B_TRANSPOSED ? check<SmemB, N, K, BLOCK_N, BLOCK_K>("B^T")
                        : check<SmemB, K, N, BLOCK_K, BLOCK_N>("B");
    std::printf("%d bad\n", bad);
    return bad != 0;
}
"""


@pytest.mark.parametrize("b_transposed", [False, True])
@pytest.mark.parametrize("block", [(64, 64, 32, 2, 2), (128, 256, 32, 2, 4), (256, 128, 64, 4, 2)])
def test_8_row_steps_keep_the_swizzle(b_transposed, block, tmp_path):
    """The generated swizzled tiles satisfy the kernel's assumption (checked in C++ with g++)."""
    from spio.generators import Constant, generate

    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("needs g++ (host C++20 compiler)")
    bm, bn, bk, wm, wn = block
    p = MatmulParams(1, 1, 8, b_transposed=b_transposed)
    cfg = MatmulConfig(bm, bn, bk, wm, wn, 2, 1)
    specs = {k: v for k, v in mm._smem_specs(p, cfg).items() if k != "SmemC"}
    for name, value in (("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk)):
        specs[name] = Constant(value)
    specs["B_TRANSPOSED"] = Constant(int(b_transposed))
    (tmp_path / "matmul_smem.h").write_text(generate(specs, title="matmul smem check"))
    (tmp_path / "check.cpp").write_text(_LAYOUT_CHECK)
    include = Path(mm.__file__).resolve().parent.parent / "include"
    exe = tmp_path / "check"
    build = subprocess.run(
        [gxx, "-std=c++20", "-O1", f"-I{include}", f"-I{tmp_path}", "check.cpp", "-o", str(exe)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
