"""Host tests of spio/tma.h (TMA tensor-map copies) and the host side of tensor maps: no GPU.

tests/gpu/data/tma_probe.cu compiles for sm_90 to the cp.async.bulk.tensor / prefetch.tensormap
PTX and UTMALDG / UTMACCTL.PF SASS with no local memory, its map a by-value parameter; the header
defines nothing below sm_90. A cluster probe (two CTAs, a multicast copy in halves, remote
mbarrier arrivals, the cluster barrier) compiles to the cluster PTX and SASS (no GPU test yet:
the Hopper matmul's cluster_m 2 configs are its first users). `spio.cuda.tensor_map.check_tiled`
refuses what the driver would, with the argument, the rule and the fix. The driver call itself is
tested against the fake libcuda (tests/host/cuda/test_cuda_fake_driver.py) and on a GPU by
tests/gpu/test_tma.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spio.compiler import compile as spio_compile
from spio.compiler import kernel_resources
from spio.compiler.locate import find_tool
from spio.cuda import TensorMap, pack_args
from spio.cuda.tensor_map import check_tiled
from spio.errors import CompileError

PROBE = (Path(__file__).parents[2] / "gpu" / "data" / "tma_probe.cu").read_text()


def test_probe_ptx_and_no_local_memory():
    ptx = spio_compile(PROBE, arch="sm_90", name="tma_probe.cu", ptx=True).decode()
    for op in (
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
        "prefetch.tensormap",
        "mbarrier.arrive.expect_tx.shared::cta.b64",
    ):
        assert op in ptx, op
    # The map is a 128-byte, 64-byte aligned kernel parameter, passed by value.
    assert ".param .align 64 .b8 tma_probe_2d_param_1[128]" in ptx, ptx[:2000]
    res = kernel_resources(spio_compile(PROBE, arch="sm_90", name="tma_probe.cu"))["tma_probe_2d"]
    assert res.local_bytes == 0, res


@pytest.mark.skipif(
    find_tool("cuobjdump") is None, reason="needs cuobjdump (CUDA toolkit, on PATH or CUDA_HOME)"
)
def test_probe_sass():
    from spio.compiler.disasm import disassemble

    sass = disassemble(spio_compile(PROBE, arch="sm_90", name="tma_probe.cu"))
    for op in ("UTMALDG.2D", "UTMACCTL.PF", "SYNCS.ARRIVE.TRANS64"):
        assert op in sass, f"{op} missing:\n{sass}"


def test_header_defines_nothing_below_sm90():
    source = (
        '#include "spio/tma.h"\n'
        'static_assert(SPIO_TMA == 0, "tma.h must define nothing below sm_90");\n'
        "__global__ void f() {}\n"
    )
    spio_compile(source, arch="sm_80", name="no_tma.cu")
    with pytest.raises(CompileError, match="needs sm_90"):
        spio_compile(PROBE, arch="sm_80", name="tma_probe.cu")


GOOD = dict(address=1 << 20, dtype="float16", shape=(256, 64), strides=(64, 1), box=(64, 64))


def test_check_tiled_accepts_a_plain_tile():
    check_tiled(**GOOD)
    check_tiled(**GOOD, swizzle=128)
    check_tiled(**{**GOOD, "shape": (3, 256, 64), "strides": (256 * 64, 64, 1), "box": (1, 8, 64)})


@pytest.mark.parametrize(
    "change, match",
    [
        ({"dtype": "float8"}, "dtype must be one of"),
        ({"shape": ()}, "1 to 5 dimensions"),
        ({"strides": (64,)}, "one entry per dimension"),
        ({"address": 8}, "16-byte aligned"),
        ({"strides": (64, 2)}, "innermost dimension must be contiguous"),
        ({"shape": (256, 60), "strides": (60, 1), "box": (64, 56)}, "multiple of 16 bytes"),
        ({"box": (300, 64)}, r"in \[1, 256\]"),
        ({"box": (64, 4)}, "innermost extent"),
        ({"swizzle": 16}, "swizzle must be one of"),
        ({"shape": (256, 128), "strides": (128, 1), "box": (64, 128), "swizzle": 128},
         "at most 128 bytes"),
        ({"l2_promotion": 32}, "l2_promotion must be one of"),
        ({"shape": (256.0, 64)}, "must hold ints"),
    ],
)  # fmt: skip
def test_check_tiled_names_the_rule(change, match):
    with pytest.raises((ValueError, TypeError), match=match):
        check_tiled(**{**GOOD, **change})


def test_a_map_is_passed_by_value():
    raw = bytes(range(128))
    m = TensorMap(raw, "float16", (256, 64), (64, 64), 128)
    assert m.box_bytes == 64 * 64 * 2
    packed = pack_args("ptti", (16, m, raw, 7))
    assert packed == (16).to_bytes(8, "little") + raw + raw + (7).to_bytes(4, "little")
    with pytest.raises(ValueError, match="must be 128 bytes"):
        pack_args("t", (raw[:64],))
    with pytest.raises(TypeError, match="spio.cuda.TensorMap"):
        pack_args("t", (bytearray(raw),))
    with pytest.raises(ValueError, match="128 bytes"):
        TensorMap(raw[:8], "float16", (1,), (1,), 0)


CLUSTER_PROBE = """
#include "spio/mbarrier.h"
#include "spio/tma.h"
// A cluster of two: each CTA copies half of a 64 x 64 box into both CTAs (multicast), both wait
// for the whole box, then each releases the peer's barrier (remote arrive) and waits for its own.
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128)
    cluster_probe(unsigned* out, const __grid_constant__ spio::tma::Descriptor map) {
    __shared__ __align__(1024) unsigned short tile[64 * 64];
    __shared__ __align__(8) unsigned long long bar[2];
    const unsigned rank = spio::cluster::rank();
    if (threadIdx.x == 0) {
        spio::mbarrier::init(&bar[0], 1);
        spio::mbarrier::init(&bar[1], 2);
        spio::mbarrier::fence_init();
    }
    spio::cluster::sync();
    if (threadIdx.x == 0) {
        spio::mbarrier::arrive_expect_tx(&bar[0], sizeof tile);
        spio::tma::load_2d_multicast(tile + rank * 32 * 64, &map, 0, rank * 32, &bar[0], 3);
    }
    spio::mbarrier::wait(&bar[0], 0);
    if (threadIdx.x < 2) spio::mbarrier::arrive_cluster(&bar[1], threadIdx.x);
    spio::mbarrier::wait_cluster(&bar[1], 0);
    out[blockIdx.x * 128 + threadIdx.x] = tile[threadIdx.x] + spio::cluster::size();
    spio::cluster::arrive();
    spio::cluster::wait();
}
"""


def test_cluster_probe_ptx_and_no_local_memory():
    """tma::load_2d_multicast, mbarrier::arrive_cluster / wait_cluster and the spio::cluster
    helpers compile for sm_90 to the multicast copy, mapa + the remote arrival (default, CTA-scope
    release semantics), the cluster-scope acquire wait, the cluster special registers and
    barrier.cluster."""
    ptx = spio_compile(CLUSTER_PROBE, arch="sm_90", name="cluster_probe.cu", ptx=True).decode()
    for op in (
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        ".multicast::cluster",
        "mapa.shared::cluster.u32",
        "mbarrier.arrive.shared::cluster.b64",
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64",
        "%cluster_ctarank",
        "%cluster_nctarank",
        "barrier.cluster.arrive.release",
        "barrier.cluster.wait.acquire",
        ".reqnctapercluster 2, 1, 1",
    ):
        assert op in ptx, op
    res = kernel_resources(spio_compile(CLUSTER_PROBE, arch="sm_90", name="cluster_probe.cu"))
    assert res["cluster_probe"].local_bytes == 0, res


@pytest.mark.skipif(
    find_tool("cuobjdump") is None, reason="needs cuobjdump (CUDA toolkit, on PATH or CUDA_HOME)"
)
def test_cluster_probe_sass():
    from spio.compiler.disasm import disassemble

    sass = disassemble(spio_compile(CLUSTER_PROBE, arch="sm_90", name="cluster_probe.cu"))
    for op in ("UTMALDG.2D.MULTICAST", "SYNCS.ARRIVE.TRANS64.RED", "UCGABAR_ARV", "UCGABAR_WAIT"):
        assert op in sass, f"{op} missing:\n{sass}"


STORE_PROBE = """
#include "spio/cta.h"
#include "spio/tma.h"
extern "C" __global__ void store_probe(const __grid_constant__ spio::tma::Descriptor c_map) {
    __shared__ __align__(1024) unsigned tile[64 * 32];
    for (int i = threadIdx.x; i < 64 * 32; i += 128) tile[i] = i;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    spio::named_barrier_sync<128>(1);
    if (threadIdx.x == 0) {
        spio::tma::store_2d(&c_map, 64 * blockIdx.x, 0, tile);
        spio::tma::store_commit();
        spio::tma::store_wait_read<1>();
        spio::tma::store_wait<0>();
    }
}
"""


def test_store_probe_ptx_and_sass():
    """tma::store_2d / store_commit / store_wait_read / store_wait and spio::named_barrier_sync
    compile for sm_90 to the bulk tensor store from shared memory, its group commit and waits
    (.read: the shared memory read; plain: the writes done) and bar.sync with a thread count,
    UTMASTG in SASS; the Hopper matmul's TMA-store epilogue is their GPU test."""
    ptx = spio_compile(STORE_PROBE, arch="sm_90", name="store_probe.cu", ptx=True).decode()
    for op in (
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group",
        "cp.async.bulk.commit_group",
        "cp.async.bulk.wait_group.read 1",
        "cp.async.bulk.wait_group 0",
        "bar.sync",
    ):
        assert op in ptx, op
    cubin = spio_compile(STORE_PROBE, arch="sm_90", name="store_probe.cu")
    assert kernel_resources(cubin)["store_probe"].local_bytes == 0
    if find_tool("cuobjdump") is not None:
        from spio.compiler.disasm import disassemble

        sass = disassemble(cubin)
        assert "UTMASTG.2D" in sass and "BAR.SYNC" in sass, sass[:3000]
