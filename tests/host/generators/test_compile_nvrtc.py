"""Generated headers with device-only types (half, bf16, vectors, fragments) compiled by NVRTC.

No GPU needed: NVRTC compiles to a cubin for sm_80 and sm_90. The kernel static_asserts that every
dtype's C++ type has the size the Python side assumes (Tensor.nbytes and smem sizing rely on it)
and that fragment and swizzled tensor types are well formed.
"""

from __future__ import annotations

import pytest

from spio.generators import dtype

compiler = pytest.importorskip("spio.compiler", reason="needs spio.compiler")
from spio.errors import LibraryNotFoundError  # noqa: E402


def _source() -> str:
    tensors = "\n".join(f"T_{d.name} = Tensor((I(4), K(8)), dtype.{d.name})" for d in dtype.ALL)
    checks = "\n".join(
        f'static_assert(sizeof(T_{d.name}::data_type) == {d.nbytes}, "dtype.{d.name} size");\n'
        f'static_assert(T_{d.name}::storage_size() == 32, "dtype.{d.name} storage");'
        for d in dtype.ALL
    )
    return f"""/*@spio
I, K, J = Dim(), Dim(), Dim()
K8 = K / 8
{tensors}
Smem = Tensor((I(64), K8(8)), dtype.uint4, swizzle=Xor(I, K8, 3))
SmemB = Tensor((J(128), K8(4)), dtype.half8, swizzle=Xor(J, K8, 2, 1))
AFrag = MmaA(dtype.half, 16, I, K)
BFrag = MmaB(dtype.half, 16, K, J)
CFrag = MmaC(I, J)
A8 = MmaA(dtype.bfloat16, 8, I, K)
Elem = Type(dtype.bfloat16)
EPS = Constant(1e-5)
@spio*/
{checks}
static_assert(Smem::storage_size() == 512 && SmemB::storage_size() == 512, "swizzled storage");
static_assert(AFrag::rows == 16 && AFrag::cols == 16 && BFrag::cols == 8 && A8::k == 8, "frags");
static_assert(sizeof(Elem) == 2, "Type");

extern "C" __global__ void use_them(float* out, const uint4* in) {{
    __shared__ uint4 smem[Smem::storage_size()];
    Smem s(smem);
    *s[I(threadIdx.x % 64)][K8(threadIdx.x / 64)] = in[threadIdx.x];
    __syncthreads();
    CFrag c;
    c.fill(0.0f);
    AFrag a;
    BFrag b;
    a.load(smem);
    b.load(smem);
    spio::mma(c, a, b);
    c.for_each([&](I i, J j, float v) {{ out[i.get() * 8 + j.get()] = v * EPS; }});
}}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_device_types_compile(arch):
    try:
        cubin = compiler.compile(_source(), arch, name="generated_types.cu", cache=None)
    except LibraryNotFoundError as e:
        pytest.skip(f"NVRTC not found: {e}")
    assert cubin[:4] == b"\x7fELF"
