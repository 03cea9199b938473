"""Host tests of spio/mbarrier.h (mbarrier with transaction counts, cp.async.bulk): no GPU needed.

tests/gpu/data/bulk_probe.cu (two phases of a bulk copy through one barrier) compiles for sm_90 to
the mbarrier/bulk-copy PTX and SYNCS / UBLKCP SASS with no local memory; the header defines
nothing for sm_80. The values are checked on an sm_90 GPU by tests/gpu/test_mbarrier.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spio.compiler import compile as spio_compile
from spio.compiler import kernel_resources
from spio.compiler.locate import find_tool
from spio.errors import CompileError

PROBE = (Path(__file__).parents[2] / "gpu" / "data" / "bulk_probe.cu").read_text()


def test_probe_ptx_and_no_local_memory():
    ptx = spio_compile(PROBE, arch="sm_90", name="bulk_probe.cu", ptx=True).decode()
    for op in (
        "mbarrier.init.shared::cta.b64",
        "fence.mbarrier_init.release.cluster",
        "mbarrier.arrive.expect_tx.shared::cta.b64",
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
        "mbarrier.try_wait.parity.shared::cta.b64",
    ):
        assert op in ptx, op
    res = kernel_resources(spio_compile(PROBE, arch="sm_90", name="bulk_probe.cu"))["bulk_probe"]
    assert res.local_bytes == 0, res


@pytest.mark.skipif(
    find_tool("cuobjdump") is None, reason="needs cuobjdump (CUDA toolkit, on PATH or CUDA_HOME)"
)
def test_probe_sass():
    from spio.compiler.disasm import disassemble

    sass = disassemble(spio_compile(PROBE, arch="sm_90", name="bulk_probe.cu"))
    for op in ("SYNCS.ARRIVE.TRANS64", "UBLKCP.S.G", "SYNCS.PHASECHK.TRANS64.TRYWAIT"):
        assert op in sass, f"{op} missing:\n{sass}"


def test_header_defines_nothing_below_sm90():
    source = (
        '#include "spio/mbarrier.h"\n'
        'static_assert(SPIO_MBARRIER == 0, "mbarrier.h must define nothing below sm_90");\n'
        "__global__ void f() {}\n"
    )
    spio_compile(source, arch="sm_80", name="no_mbarrier.cu")
    with pytest.raises(CompileError, match="needs sm_90 or newer"):
        spio_compile(PROBE, arch="sm_80", name="bulk_probe.cu")


def test_two_waits_in_one_function_compile():
    """wait() carries a PTX label; each inlined copy is scoped in its own { } block."""
    source = (
        '#include "spio/mbarrier.h"\n'
        "__global__ void f() { __shared__ __align__(8) unsigned long long bar[2];\n"
        "  spio::mbarrier::wait(&bar[0], 0); spio::mbarrier::wait(&bar[1], 1); }\n"
    )
    spio_compile(source, arch="sm_90", name="two_waits.cu")
