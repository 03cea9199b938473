"""Host tests of the device building blocks (spio/include/spio/{mma,fragment,ldmatrix,...}.h).

No GPU needed: every header compiles alone with NVRTC for sm_80 and sm_90 and to nothing under a
host compiler; misuse fails with the promised static_assert message; small kernels using mma,
ldmatrix and cp.async compile to the expected instructions with no local memory. SASS checks need
cuobjdump (CUDA toolkit) and skip without it; the PTX and resource checks always run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from spio.compiler import compile as spio_compile
from spio.compiler import kernel_resources
from spio.compiler.cache import INCLUDE_DIR
from spio.compiler.locate import find_tool
from spio.errors import CompileError

ARCHS = ("sm_80", "sm_90")
HEADER_DIR = Path(INCLUDE_DIR) / "spio"

# The device-only building blocks: every header that includes the device prelude, plus the
# prelude and the umbrella (found by content, so a new block header is tested automatically).
GPU_HEADERS = sorted(
    {"device.h", "gpu.h"}
    | {p.name for p in HEADER_DIR.glob("*.h") if '#include "spio/device.h"' in p.read_text()}
)


def test_gpu_headers_found():
    expected = {"mma.h", "fragment.h", "ldmatrix.h", "async_copy.h", "pipeline.h", "reduce.h"}
    assert expected | {"vector.h", "smem.h"} <= set(GPU_HEADERS), GPU_HEADERS


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("header", GPU_HEADERS)
def test_header_compiles_alone_nvrtc(header, arch):
    spio_compile(f'#include "spio/{header}"\n', arch=arch, name=f"only_{header}.cu")


def _host_cxx() -> str | None:
    return shutil.which("g++") or shutil.which("clang++")


@pytest.mark.skipif(_host_cxx() is None, reason="needs a host C++ compiler (g++ or clang++)")
@pytest.mark.parametrize("header", GPU_HEADERS)
def test_header_is_empty_under_host_compiler(header, tmp_path):
    """Device-only headers compile under a host compiler and define no building block there."""
    src = tmp_path / "host.cpp"
    src.write_text(
        f'#include "spio/{header}"\n'
        'static_assert(SPIO_GPU_BLOCKS == 0, "host compile must not see the GPU blocks");\n'
        "int main() { return 0; }\n"
    )
    cmd = [_host_cxx(), "-std=c++20", "-fsyntax-only", f"-I{INCLUDE_DIR}", str(src)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# --- rejected at compile time -----------------------------------------------------------------

DIMS = """
struct I : spio::Dim<I> { using spio::Dim<I>::Dim; };
struct J : spio::Dim<J> { using spio::Dim<J>::Dim; };
struct K : spio::Dim<K> { using spio::Dim<K>::Dim; };
"""

REJECTED = [
    (
        "float d[4]; unsigned a[4], b[2]; spio::mma_m16n8k16<float>(d, a, b);",
        "mma_m16n8k16<T>: T must be __half or __nv_bfloat16",
    ),
    (
        "float d[4]; unsigned a[2], b = 0; spio::mma_m16n8k8<int>(d, a, b);",
        "mma_m16n8k8<T>: T must be __half or __nv_bfloat16",
    ),
    (
        "spio::MmaC<I, J> c; spio::MmaA<__half, 16, I, K> a; spio::MmaB<__half, 16, J, K> b;"
        " spio::mma(c, a, b);",
        "A's column dim and B's row dim must be the same reduction dim",
    ),
    (
        "spio::MmaC<J, I> c; spio::MmaA<__half, 16, I, K> a; spio::MmaB<__half, 16, K, J> b;"
        " spio::mma(c, a, b);",
        "A's row dim must be C's row dim",
    ),
    ("spio::MmaA<__half, 32, I, K> a; (void)a;", "K must be 16 \\(m16n8k16\\) or 8"),
    ("spio::MmaC<spio::Fold<I, 8>, J> c; (void)c;", "Row and Col must have stride 1"),
    ("spio::MmaB<float, 16, K, J> b; (void)b;", "T must be __half or __nv_bfloat16"),
    ("spio::Pipeline<1>::run(1, [](int, int) {}, [](int, int) {});", "Stages must be >= 2"),
    ("spio::Vec8<float> v; (void)v;", "Vec8<T>: T must be __half or __nv_bfloat16"),
    ("float s[64]; spio::block::sum<33>(1.0f, s);", "Warps must be in \\[1, 32\\]"),
    ("spio::cp_async_wait<-1>();", "cp_async_wait<N>: N is a count of pending groups"),
]


@pytest.mark.parametrize("snippet, message", REJECTED, ids=[m for _, m in REJECTED])
def test_rejected_at_compile_time(snippet, message):
    source = f'#include "spio/gpu.h"\n{DIMS}\n__global__ void f() {{ {snippet} }}\n'
    with pytest.raises(CompileError, match=message):
        spio_compile(source, arch="sm_90", name="rejected.cu")


# --- instructions and local memory --------------------------------------------------------------

PROBE = (
    '#include "spio/gpu.h"\n'
    + DIMS
    + """
using T = SPIO_T;
// A 16x16 A tile and a 16x8 B tile staged by cp.async, loaded by ldmatrix, multiplied twice.
extern "C" __global__ void probe(float* out, const T* a, const T* b) {
    __shared__ __align__(16) T sa[16 * 16];
    __shared__ __align__(16) T sb[16 * 8];
    const int lane = spio::lane_id();
    spio::cp_async_16(&sa[lane * 8], &a[lane * 8]);
    if (lane < 16) spio::cp_async_16(&sb[lane * 8], &b[lane * 8], lane < 12);
    spio::cp_async_commit();
    spio::cp_async_wait<0>();
    __syncwarp();
    spio::MmaA<T, 16, I, K> fa;
    spio::MmaB<T, 16, K, J> fb;
    spio::MmaA<T, 8, I, K> fa8;
    spio::MmaB<T, 8, K, J> fb8;
    spio::MmaC<I, J> c;
    c.fill(0.0f);
    fa.load(&sa[fa.ldmatrix_row().get() * 16 + fa.ldmatrix_col().get()]);
    fb.load_trans(&sb[fb.ldmatrix_trans_row().get() * 8 + fb.ldmatrix_trans_col().get()]);
    fa8.load(&sa[fa8.ldmatrix_row().get() * 16 + fa8.ldmatrix_col().get()]);
    fb8.load_trans(&sb[fb8.ldmatrix_trans_row().get() * 8 + fb8.ldmatrix_trans_col().get()]);
    spio::mma(c, fa, fb);
    spio::mma(c, fa8, fb8);
    c.for_each([&](I i, J j, float v) { out[i.get() * 8 + j.get()] = v; });
}
"""
)

PROBE_CASES = [(arch, t) for arch in ARCHS for t in ("__half", "__nv_bfloat16")]


def _probe(arch: str, type_name: str, ptx: bool = False) -> bytes:
    return spio_compile(
        PROBE, arch=arch, options=(f"-DSPIO_T={type_name}",), name="probe.cu", ptx=ptx
    )


@pytest.mark.parametrize("arch, type_name", PROBE_CASES)
def test_probe_ptx_and_no_local_memory(arch, type_name):
    ptx = _probe(arch, type_name, ptx=True).decode()
    kind = "f16" if type_name == "__half" else "bf16"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32" in ptx
    assert f"mma.sync.aligned.m16n8k8.row.col.f32.{kind}.{kind}.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in ptx
    assert "cp.async.cg.shared.global" in ptx
    resources = kernel_resources(_probe(arch, type_name))["probe"]
    assert resources.local_bytes == 0, f"probe uses local memory: {resources}"


@pytest.mark.skipif(
    find_tool("cuobjdump") is None, reason="needs cuobjdump (CUDA toolkit, on PATH or CUDA_HOME)"
)
@pytest.mark.parametrize("arch, type_name", PROBE_CASES)
def test_probe_sass(arch, type_name, tmp_path):
    cubin = tmp_path / "probe.cubin"
    cubin.write_bytes(_probe(arch, type_name))
    sass = subprocess.run(
        [str(find_tool("cuobjdump")), "-sass", str(cubin)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    opcodes = set(re.findall(r"\b([A-Z][A-Z0-9]+)(?:\.[A-Z0-9_.]+)?\s", sass))
    for needed in ("HMMA", "LDSM", "LDGSTS"):
        assert needed in opcodes, f"{needed} missing from the {arch} SASS:\n{sass}"
    assert not {"STL", "LDL"} & opcodes, f"local memory traffic in the {arch} SASS:\n{sass}"


# --- the typed layer end to end (also run on the GPU by tests/gpu/test_gpu_blocks.py) -----------

TYPED_MATMUL = Path(__file__).parents[2] / "gpu" / "data" / "gpu_blocks" / "typed_matmul.cu"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("stages", [2, 4])
def test_typed_matmul_compiles_without_local_memory(arch, stages):
    options = ("-DSPIO_T=__nv_bfloat16", "-DSPIO_KDIM=64", f"-DSPIO_STAGES={stages}")
    cubin = spio_compile(TYPED_MATMUL.read_text(), arch=arch, options=options, name="tm.cu")
    resources = kernel_resources(cubin)["typed_matmul"]
    assert resources.local_bytes == 0, f"typed_matmul uses local memory: {resources}"
