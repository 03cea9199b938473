"""The typed-dimension idioms of the conv2d_gw8 kernels, compiled for the host with g++.

Builds the generated header of real fprop / wgrad / reduce variants, then evaluates on the host the
exact subscript expressions the .cu files use (block -> tile via CompoundIndex and folds, cursor
moves such as pixel[W(8)], padded shared-memory planes, weight and partial layouts) and compares
each pointer offset with the layout it must address (NHWC x/y, (C, 8, R, S) weights). This pins
the kernels' use of the typed library to the memory layouts the Python side allocates.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from spio.generators import generate
from spio.kernels.conv2d_gw8 import fprop as fp
from spio.kernels.conv2d_gw8 import wgrad as wg
from spio.kernels.conv2d_gw8 import wgrad_reduce as rd
from spio.kernels.conv2d_gw8 import wgrad_tiling
from spio.kernels.conv2d_gw8.params import (
    Conv2dGw8Config,
    Conv2dGw8Params,
    Conv2dGw8ReduceConfig,
    Conv2dGw8WgradConfig,
)

INCLUDE = Path(__file__).resolve().parents[3] / "spio" / "include"
GXX = shutil.which("g++")

pytestmark = pytest.mark.skipif(GXX is None, reason="needs g++ (host C++20 compiler)")

# Host stand-ins for the CUDA types the generated header names (only sizes matter here).
PRELUDE = """
#include <cstdio>
struct uint4 { unsigned x, y, z, w; };
"""


def _header(specs) -> str:
    text = generate(specs, title="host layout test")
    return text.replace("__half", "unsigned short").replace("__nv_bfloat16", "unsigned short")


def _run(tmp_path: Path, specs, body: str) -> list[int]:
    (tmp_path / "gen.h").write_text(_header(specs))
    src = tmp_path / "main.cpp"
    src.write_text(PRELUDE + '#include "gen.h"\nint main() {\n' + body + "\n return 0; }\n")
    exe = tmp_path / "main"
    subprocess.run([GXX, "-std=c++20", "-I", str(INCLUDE), "-I", str(tmp_path), str(src), "-o",
                    str(exe)], check=True, capture_output=True, text=True)  # fmt: skip
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return [int(v) for v in out.split()]


def _print(expr: str) -> str:
    return f'std::printf("%lld\\n", (long long)({expr}));'


def test_fprop_layouts(tmp_path):
    p = Conv2dGw8Params(n=2, c=32, h=5, w=19, r=3, s=2, pad_h=1, pad_w=0, has_bias=True)
    cfg = Conv2dGw8Config(block_p=2, block_q=32, warps=2, stages=3)
    specs = fp.spec(p, cfg).specs
    g = p.groups
    tile_w = cfg.block_q + p.s - 1
    plane = fp.out_plane(cfg)
    blk = 4  # (pb, qb, gb) = (2, 0, 0) with 1 q tile and 2 group blocks -> pb = 2, gb = 0
    lines = [
        "static unsigned s_in[SmemInput::storage_size()];",
        "static unsigned s_out[SmemOutput::storage_size()];",
        "static uint4 x[Input::storage_size()];",
        "static unsigned y[Output::storage_size()];",
        "static unsigned short wt[Weight::storage_size()];",
        "const SmemInput smem_input(s_in); const SmemOutput smem_output(s_out);",
        "const Input input(x); const Output output(y); "
        "const Weight weight(wt); const Bias bias(wt);",
        f"const BlockIdx block({blk});",
        _print("block.get<PB>().unfold().get()"),
        _print("block.get<QB>().unfold().get()"),
        "const C8 group0 = block.get<GB>().unfold().template fold<8>();",
        _print("group0.get()"),
        "const BlockIdx block3(3);",
        _print("block3.get<GB>().unfold().template fold<8>().get()"),
        "const C8 group = group0 + C8(1);",
        _print("input[H(3)][W(7)][group0 + C8(1)].get() - x"),
        _print("smem_input[STAGE(2)][C8(1)][W(5)].get() - s_in"),
        "const auto plane = smem_input[STAGE(1)][C8(1)];",
        "const auto pixel = plane[W(16 + 1 + 5)][CP(3)];",
        _print("pixel.get() - s_in"),
        _print("pixel[W(8)].get() - s_in"),
        _print("output[P(4)][Q(17)][group][CP(2)].get() - y"),
        _print("smem_output[OUTBUF(1)][C8(1)][Q(9)][CP(3)].get() - s_out"),
        "const auto tap = weight[group][KO(5)][R(2)][S(1)];",
        _print("tap[CI(6)].get() - wt"),
        _print("bias[group][KO(7)].get() - wt"),
        _print("SmemInput::storage_size()"),
        _print("SmemOutput::storage_size()"),
        _print("SmemWeight::storage_size()"),
        "static unsigned short s_w[SmemWeight::storage_size()];",
        "const SmemWeight smem_weight(s_w);",
        _print("weight[C8(3)].get() - wt"),
        _print("smem_weight[C8(1)][KO(5)][R(2)][S(1)][CI(6)].get() - s_w"),
    ]
    got = _run(tmp_path, specs, "\n".join(lines))
    want = [
        2 * cfg.block_p, 0, 0,  # block 4: p0 = 4, q0 = 0, group0 = 0
        cfg.warps,  # block 3: gb = 1 -> group0 = 2
        (3 * p.w + 7) * g + 1,  # x pixel (3, 7), group 1 (16-byte units)
        ((2 * cfg.warps + 1) * tile_w + 5) * 4,
        ((1 * cfg.warps + 1) * tile_w + 22) * 4 + 3,
        ((1 * cfg.warps + 1) * tile_w + 30) * 4 + 3,
        ((4 * p.q + 17) * g + 1) * 4 + 2,  # y pixel (4, 17), channels 8 + 4, 8 + 5
        ((1 * cfg.warps + 1) * plane + 9) * 4 + 3,
        ((1 * 8 + 5) * 8 + 6) * p.r * p.s + 2 * p.s + 1,  # w[8 + 5, 6, 2, 1] of (C, 8, R, S)
        8 + 7,
        cfg.stages * cfg.warps * tile_w * 4,
        2 * cfg.warps * plane * 4,  # the output rows end where the weights start (padded planes)
        cfg.warps * 64 * p.r * p.s,  # the CTA's weights: WARPS contiguous 8x8xRxS blocks
        3 * 64 * p.r * p.s,  # group 3's block starts 3 blocks into w
        ((1 * 8 + 5) * 8 + 6) * p.r * p.s + 2 * p.s + 1,
    ]  # fmt: skip
    assert got == want
    assert fp.smem_bytes(p, cfg) == 4 * (got[-5] + got[-4]) + 2 * got[-3]


def test_wgrad_layouts(tmp_path):
    p = Conv2dGw8Params(n=3, c=24, h=6, w=21, r=3, s=3, pad_h=1, pad_w=1, has_bias=True)
    cfg = Conv2dGw8WgradConfig(block_p=4, block_q=16, warps=1, stages=2, splits_per_sm=1)
    specs = wg.spec(p, cfg).specs
    g = p.groups
    tw = wg.tile_w(p, cfg)
    lines = [
        "static uint4 s[SmemInput::storage_size() + SmemGrad::storage_size()];",
        "static uint4 x[Input::storage_size()];",
        "static uint4 dy[Grad::storage_size()];",
        "static float part[Partial::storage_size()];",
        "const SmemInput smem_input(s); const SmemGrad smem_grad(s + SmemInput::storage_size());",
        "const Input input(x); const Grad grad(dy); const Partial partial(part);",
        "const BiasPartial bias_partial(part);",
        "const BlockIdx block(5);",  # (qb, gb) = (1, 2) with 3 group blocks
        _print("block.get<QB>().unfold().get()"),
        _print("block.get<QB>().get()"),
        "const C8 group = block.get<GB>().unfold().template fold<8>();",
        _print("group.get()"),
        _print("smem_input[STAGE(1)][C8(0)][W(17)].get() - s"),
        _print("smem_grad[DYROW(3)][C8(0)][Q(11)].get() - s"),
        _print("grad[P(5)][Q(20)][group].get() - dy"),
        _print("partial[group][KO(3)][CI(6)][R(1)][S(2)].get() - part"),
        _print("bias_partial[group][KO(3)].get() - part"),
    ]
    got = _run(tmp_path, specs, "\n".join(lines))
    want = [
        cfg.block_q, 1, 2,
        (1 * tw + 17),
        cfg.stages * tw + 3 * cfg.block_q + 11,
        (5 * p.q + 20) * g + 2,
        ((2 * 8 + 3) * 8 + 6) * 9 + 1 * 3 + 2,
        2 * 8 + 3,
    ]  # fmt: skip
    assert got == want
    pipeline = 16 * (cfg.stages * tw + wg.dy_rows(p, cfg) * cfg.block_q)
    assert wg.smem_bytes(p, cfg) == max(pipeline, 4 * cfg.warps * 64 * p.r * p.s)


def test_wgrad_partial_staging_matches_the_slice_layout(tmp_path):
    """The epilogue stages each warp's fragments in SmemPartial and copies the block to the slice
    from partial[group0] on: the two layouts must agree element for element."""
    p = Conv2dGw8Params(n=3, c=32, h=6, w=21, r=2, s=5, pad_h=1, pad_w=2, has_bias=True)
    cfg = Conv2dGw8WgradConfig(block_p=4, block_q=16, warps=2, stages=2, splits_per_sm=1)
    specs = wg.spec(p, cfg).specs
    lines = [
        "static float part[Partial::storage_size()];",
        "static float st[SmemPartial::storage_size()];",
        "const Partial partial(part); const SmemPartial smem_partial(st);",
        "const C8 group0(2);",
        _print("SmemPartial::storage_size()"),
        _print("partial[group0].get() - part"),
    ]
    idx = [(w, ko, ci, r, s) for w in range(2) for ko in (0, 7) for ci in (1, 6) for r in range(2)
           for s in (0, 4)]  # fmt: skip
    for w, ko, ci, r, s in idx:
        sub = f"[KO({ko})][CI({ci})][R({r})][S({s})]"
        lines.append(
            _print(
                f"(partial[group0 + C8({w})]{sub}.get() - partial[group0].get()) - "
                f"(smem_partial[C8({w})]{sub}.get() - st)"
            )
        )
    got = _run(tmp_path, specs, "\n".join(lines))
    assert got[0] == cfg.warps * 64 * p.r * p.s
    assert got[1] == 2 * 64 * p.r * p.s
    assert got[2:] == [0] * len(idx)
    assert wg.smem_bytes(p, cfg) >= 4 * got[0]


def test_reduce_index(tmp_path):
    p = Conv2dGw8Params(n=1, c=16, h=4, w=4, r=2, s=3, pad_h=0, pad_w=1, has_bias=True)
    cfg = Conv2dGw8ReduceConfig(threads=128)
    specs = rd.reduce_spec(p, cfg).specs
    lines = [
        "const BlockIdx block(3);",
        _print("(block.get<EB>().unfold() + E(17)).get()"),
        _print("BlockIdx::size()"),
        _print("SmemParts::storage_size()"),
        "static float s[SmemParts::storage_size()]; const SmemParts parts(s);",
        _print("parts[PART(2)][LANE(5)].get() - s"),
    ]
    got = _run(tmp_path, specs, "\n".join(lines))
    assert got == [3 * 32 + 17, rd.reduce_grid(p, cfg)[0], 4 * 32, 2 * 32 + 5]
    assert rd.reduce_grid(p, cfg)[0] == -(-(16 * 8 * 2 * 3 + 16) // 32)


@pytest.mark.parametrize("warps", [2, 4, 8])
def test_fprop_tma_rows_layout_is_what_tma_writes(tmp_path, warps):
    """A TMA_ROWS variant's input stage, subscripted as the kernel reads a fragment
    (smem_input[STAGE][C8] then [W][CP]), addresses exactly the byte where TMA's WARPS*16-byte
    swizzle puts group g of pixel j of the box: byte b = stage offset + j * WARPS * 16 + 16 g + 4 t,
    with bits [4, 4 + log2 WARPS) XORed by bits [7, 7 + log2 WARPS) of b (CUTLASS's Swizzle<B, 4,
    3>), the stage starting on a multiple of the 128 * WARPS-byte period."""
    from spio.cuda import known_device

    h100 = known_device("H100")
    p = Conv2dGw8Params(n=2, c=64, h=9, w=30, r=3, s=3, pad_h=1, pad_w=1)
    cfg = Conv2dGw8Config(block_p=4, block_q=16, warps=warps, stages=3)
    assert fp.tma_rows(p, cfg, h100)
    specs = fp.spec(p, cfg, h100).specs
    width = fp.stage_w(p, cfg, h100)
    assert width % 8 == 0 and width >= fp.tile_w(p, cfg)
    stage_bytes = width * warps * 16
    assert stage_bytes % (128 * warps) == 0
    lines = [
        "static unsigned s_in[SmemInput::storage_size()];",
        "const SmemInput smem_input(s_in);",
        _print("SmemInput::storage_size()"),
    ]
    expected = [cfg.stages * stage_bytes // 4]
    bits = warps.bit_length() - 1
    for stage in range(cfg.stages):
        for g in range(warps):
            for j in range(width):
                for t in range(4):
                    lines.append(
                        _print(f"smem_input[STAGE({stage})][C8({g})][W({j})][CP({t})].get() - s_in")
                    )
                    b = stage * stage_bytes + j * warps * 16 + 16 * g + 4 * t
                    b ^= ((b >> 7) & ((1 << bits) - 1)) << 4
                    expected.append(b // 4)
    assert _run(tmp_path, specs, "\n".join(lines)) == expected


@pytest.mark.parametrize("warps", [2, 4, 8])
@pytest.mark.parametrize("stride", [1, 2])
def test_wgrad_tma_rows_layout_is_what_tma_writes(tmp_path, warps, stride):
    """A wgrad TMA_ROWS variant's x and dy rings, addressed exactly as the kernel's ldmatrix rows
    are (x_lane[j] = smem_input[warp_group][W(SW (l % 8) + (l / 8) % 2 + 2j)], plus the column
    chunk smem_input[W(SW 8 qc)] and stage offsets; dy_lane = smem_grad[warp_group][Q(l % 8)]
    plus smem_grad[Q(8 qc)] and slot offsets; smem_grad at smem_input + its storage), land on
    the byte where TMA's WARPS*16-byte swizzle puts group g of box pixel j: ring base (aligned
    to 128 * WARPS) + slot offset + j * WARPS * 16 + 16 g, bits [4, 4 + log2 WARPS) XORed by
    bits [7, 7 + log2 WARPS)."""
    from spio.cuda import known_device

    h100 = known_device("H100")
    p = Conv2dGw8Params(n=2, c=64, h=13, w=21, r=3, s=3, pad_h=1, pad_w=1, has_bias=True,
                        stride_h=stride, stride_w=stride)  # fmt: skip
    cfg = Conv2dGw8WgradConfig(block_p=4, block_q=16, warps=warps, stages=3, splits_per_sm=1)
    assert wg.tma_rows(p, cfg, h100)
    specs = wg.spec(p, cfg, h100).specs
    tw, width, bq = wg.tile_w(p, cfg), wg.stage_w(p, cfg, h100), cfg.block_q
    dyr = wg.dy_rows(p, cfg)
    pix = warps * 16
    x_stage_b, dy_slot_b = width * pix, bq * pix
    period = 128 * warps
    assert wg.row_align(p, cfg, h100) == period
    assert x_stage_b % period == 0 and dy_slot_b % period == 0
    lines = [
        "static uint4 s[SmemInput::storage_size() + SmemGrad::storage_size()];",
        "const SmemInput smem_input(s); const SmemGrad smem_grad(s + SmemInput::storage_size());",
        "auto B = [](const uint4* a, const uint4* b) { return (long long)((a - b) * 16); };",
        _print("SmemInput::storage_size() * 16"),
        _print("SmemGrad::storage_size() * 16"),
        _print("SmemPartial::storage_size() * 4"),
        _print("B(smem_input[STAGE(1)].get(), smem_input.get())"),
        _print("B(smem_grad[DYROW(1)].get(), smem_grad.get())"),
        _print("X_BOX_BYTES"), _print("DY_BOX_BYTES"), _print("ROW_ALIGN"),
    ]  # fmt: skip
    expected = [cfg.stages * x_stage_b, dyr * dy_slot_b, wgrad_tiling.partial_stage_bytes(p, cfg),
                x_stage_b, dy_slot_b, tw * pix, bq * pix, period]  # fmt: skip
    bits = warps.bit_length() - 1

    def tma(b: int) -> int:  # CUTLASS Swizzle<bits, 4, 3> on a base aligned to the period
        return b ^ (((b >> 7) & ((1 << bits) - 1)) << 4)

    sw, s_pairs = p.stride_w, wg.s_pairs(p)
    for g in range(warps):
        for lane in range(16):
            for j in range(s_pairs):
                w_idx = sw * (lane % 8) + (lane // 8) % 2 + 2 * j
                for qc in range(bq // 8):
                    for st in range(cfg.stages):
                        lines.append(_print(
                            f"B(smem_input[C8({g})][W({w_idx})].get(), s) + "
                            f"B(smem_input[W({sw * 8 * qc})].get(), smem_input.get()) + "
                            f"B(smem_input[STAGE({st})].get(), smem_input.get())"
                        ))  # fmt: skip
                        pixel = w_idx + sw * 8 * qc
                        assert pixel < tw  # inside the box
                        expected.append(tma(st * x_stage_b + pixel * pix + 16 * g))
        for lane in range(8):
            for qc in range(bq // 8):
                for slot in range(dyr):
                    lines.append(_print(
                        f"B(smem_grad[C8({g})][Q({lane})].get(), s) + "
                        f"B(smem_grad[Q({8 * qc})].get(), smem_grad.get()) + "
                        f"B(smem_grad[DYROW({slot})].get(), smem_grad.get())"
                    ))  # fmt: skip
                    base = cfg.stages * x_stage_b + slot * dy_slot_b
                    expected.append(tma(base + (lane + 8 * qc) * pix + 16 * g))
    got = _run(tmp_path, specs, "\n".join(lines))
    assert got[:8] == expected[:8]
    assert got == expected
    ring = expected[0] + expected[1]
    # the kernel: ring_pad (< ROW_ALIGN) + max(rings, partial staging) + one mbarrier per stage
    assert wg.smem_bytes(p, cfg, h100) >= (period - 16) + max(ring, expected[2]) + 8 * cfg.stages
