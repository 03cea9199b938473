"""Generated headers compiled with the C++ library (g++ -std=c++20 -I spio/include) and run.

The oracle is Python: for random layouts (row-major, padded, folded, swizzled) and compound indices,
the C++ program checks the emitted types' storage_size, strides and sizes at compile time and
compares element offsets and index decompositions at run time against values computed here from
the spec. The specs come from an `@spio` block in the C++ source itself, via `expand`.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from spio.generators import CompoundIndex, Dim, Module, Tensor, Xor, dtype
from spio.generators.blocks import expand

INCLUDE = Path(__file__).resolve().parents[3] / "spio" / "include"
GXX = shutil.which("g++")

pytestmark = pytest.mark.skipif(
    GXX is None or not (INCLUDE / "spio" / "spio.h").exists(),
    reason="needs g++ and spio/include/spio/spio.h",
)


def _index(dim, value: int) -> int:
    """The index of a tensor dim for a logical value of its base (the coarsest fold not wrapped)."""
    if isinstance(dim, Module):
        return (value // dim.stride) % dim.size
    return value // dim.stride


def offset(t: Tensor, values: dict[Dim, int]) -> int:
    """Element offset of the logical point `values` (base dim -> value) in tensor `t`."""
    idx = {d.dim: _index(d.dim, values[d.dim.base]) for d in t.dims}
    for x in t.swizzle:
        idx[x.col] ^= (idx[x.row] >> x.shift) & ((1 << x.bits) - 1)
    return sum(idx[d.dim] * s for d, s in zip(t.dims, t.strides, strict=True))


def _block(rng: random.Random) -> str:
    """An @spio block declaring random layouts (row-major, padded, folded, swizzled, broadcast)."""
    n, c, i = rng.randint(1, 5), 8 * rng.randint(1, 4), rng.randint(1, 6)
    k8 = rng.randint(1, 4)
    pad = rng.randint(0, 5)
    m, bits = 8 * rng.randint(1, 4), rng.randint(1, 3)
    b1, b2, b3 = (rng.randint(1, 5) for _ in range(3))  # size 1 included: ties in stride
    return f"""
N, C, K, I, M = Dim(), Dim(), Dim(), Dim(), Dim()
C8 = C / 8
X = Tensor((N({n}), C({c})), dtype.float)
P = Tensor((N({n}), I({i}), C8({c // 8})), dtype.float, strides={{N: {i * (c // 8) + pad}}})
A = Tensor(((K / 8)({k8}), I({i}), (K % 8)(8)), dtype.float)
F = Tensor(((K / 16)({k8}), (K / 2 % 8)(8), I({i}), (K % 2)(2)), dtype.int32)
S = Tensor((M({m}), (K / 8)(8)), dtype.float, swizzle=Xor(M, K / 8, {bits}, {rng.randint(0, 1)}))
Z = Tensor((N({n}), C({c})), dtype.float, strides={{N: 0}})
B = CompoundIndex((N / 2)({b1}), I({b2}), C8({b3}))
"""


def _program(ns: dict, rng: random.Random) -> str:
    """C++ checks of the tensors and the index in `ns` against the Python oracle."""
    names = {ns[k]: k for k in ("N", "C", "K", "I", "M")}
    checks: list[str] = []
    for tname in ("X", "P", "A", "F", "S", "Z"):
        t: Tensor = ns[tname]
        checks.append(f'static_assert({tname}::storage_size() == {t.storage_size}, "{tname}");')
        for j, s in enumerate(t.strides):
            checks.append(f'static_assert({tname}::layout::strides[{j}] == {s}, "{tname} s{j}");')
        bases = list(dict.fromkeys(d.dim.base for d in t.dims))
        span = {b: max(d.size * d.dim.stride for d in t.dims if d.dim.base is b) for b in bases}
        for _ in range(12):
            point = {b: rng.randrange(span[b]) for b in bases}
            sub = "".join(f"[{names[b]}({v})]" for b, v in point.items())
            checks.append(
                f"CHECK({tname}(buf_{tname}){sub}.get() - buf_{tname}, {offset(t, point)});"
            )
    b: CompoundIndex = ns["B"]
    checks.append(f'static_assert(B::size() == {b.size}, "B size");')
    for _ in range(12):
        lin = rng.randrange(b.size)
        rest, comps = lin, []
        for d in reversed(b.dims):
            comps.append(rest % d.size)
            rest //= d.size
        comps = comps[::-1]
        for d, v in zip(b.dims, comps, strict=True):
            spelled = (
                names[d.dim]
                if isinstance(d.dim, Dim)
                else (f"spio::Fold<{names[d.dim.base]}, {d.dim.stride}>")
            )
            checks.append(f"CHECK((B({lin}).get<{spelled}>().get()), {v});")
    buffers = "\n".join(
        f"static {'int' if ns[t].dtype == dtype.int32 else 'float'} buf_{t}[{ns[t].storage_size}];"
        for t in ("X", "P", "A", "F", "S", "Z")
    )
    body = "\n    ".join(checks)
    return f"""
#include <cstdio>
{buffers}
static int failures = 0;
#define CHECK(expr, expected) do {{ long long got_ = (expr); if (got_ != (expected)) {{ \\
    std::printf("FAIL line %d: %s = %lld, expected %lld\\n", __LINE__, #expr, got_, \\
                (long long)(expected)); ++failures; }} }} while (0)
int main() {{
    {body}
    if (failures == 0) std::printf("ok\\n");
    return failures != 0;
}}
"""


def test_generated_header_compiles_and_matches_python(tmp_path, seed):
    rng = random.Random(seed)
    block = _block(rng)
    ns: dict = {}
    exec(
        block,
        {"Dim": Dim, "Tensor": Tensor, "CompoundIndex": CompoundIndex, "Xor": Xor, "dtype": dtype},
        ns,
    )  # fmt: skip  (the same specs, to build the oracle from)
    source = f"/*@spio{block}@spio*/\n" + _program(ns, rng)
    header = expand(source, name="layouts.cpp")
    (tmp_path / "layouts.h").write_text(header)
    (tmp_path / "layouts.cpp").write_text(source)
    exe = tmp_path / "layouts"
    build = subprocess.run(
        [GXX, "-std=c++20", "-Wall", "-I", str(INCLUDE), "-include", str(tmp_path / "layouts.h"),
         str(tmp_path / "layouts.cpp"), "-o", str(exe)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, f"g++ failed:\n{build.stderr[-4000:]}\n--- header ---\n{header}"
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout[-4000:] + header


def test_constants_types_and_macros_compile(tmp_path):
    src = """/*@spio
WARPS = Constant(4)
EPS = Constant(1e-5)
BIG = Constant(2**40)
MASK = Constant(0xFFFFFFFF, dtype.uint32)
ON = Constant(True)
Real = Type(dtype.float)
LEVEL = Macro(3)
@spio*/
static_assert(WARPS == 4 && ON && BIG == (1LL << 40) && MASK == 0xFFFFFFFFu, "constants");
static_assert(sizeof(Real) == 4 && EPS > 0.0f && LEVEL == 3, "types");
#if LEVEL != 3
#error "macro"
#endif
int main() { return 0; }
"""
    (tmp_path / "c.h").write_text(expand(src, name="c.cpp"))
    (tmp_path / "c.cpp").write_text(src)
    build = subprocess.run(
        [GXX, "-std=c++20", "-fsyntax-only", "-I", str(INCLUDE), "-include",
         str(tmp_path / "c.h"), str(tmp_path / "c.cpp")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-4000:]


def test_fold_types_are_the_cpp_folds(tmp_path):
    # K / 8 / 2 is emitted as spio::Fold<K, 16>, which the library says is spio::Fold<K8, 2>.
    src = """/*@spio
K = Dim()
K8 = K / 8
K16 = K / 8 / 2
KM = (K / 8) % 4
@spio*/
template <class A, class B> struct same { static constexpr bool value = false; };
template <class A> struct same<A, A> { static constexpr bool value = true; };
static_assert(same<K16, spio::Fold<K8, 2>>::value, "fold of fold");
static_assert(same<KM, spio::Module<K8, 4>>::value, "module of fold");
static_assert(K8(3) == K(24), "fold value");
int main() { return 0; }
"""
    (tmp_path / "f.h").write_text(expand(src, name="f.cpp"))
    (tmp_path / "f.cpp").write_text(src)
    build = subprocess.run(
        [GXX, "-std=c++20", "-fsyntax-only", "-I", str(INCLUDE), "-include",
         str(tmp_path / "f.h"), str(tmp_path / "f.cpp")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-4000:]


def _run_program(tmp_path: Path, source: str, name: str) -> subprocess.CompletedProcess:
    (tmp_path / f"{name}.h").write_text(expand(source, name=f"{name}.cpp"))
    (tmp_path / f"{name}.cpp").write_text(source)
    exe = tmp_path / name
    build = subprocess.run(
        [GXX, "-std=c++20", "-I", str(INCLUDE), "-include", str(tmp_path / f"{name}.h"),
         str(tmp_path / f"{name}.cpp"), "-o", str(exe)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-4000:]
    return subprocess.run([str(exe)], capture_output=True, text=True)


def test_compound_index_with_size_one_extents(tmp_path):
    # Size-1 extents share their stride with a neighbour; only the first is left unreduced.
    src = """/*@spio
P, I, C = Dim(), Dim(), Dim()
B = CompoundIndex(P(3), I(1), C(1))
@spio*/
#include <cstdio>
int main() {
    int bad = 0;
    for (int lin = 0; lin < B::size(); ++lin) {
        B b(lin);
        if (b.get<P>().get() != lin || b.get<I>().get() != 0 || b.get<C>().get() != 0) {
            std::printf("B(%d): P %d I %d C %d\\n", lin, b.get<P>().get(), b.get<I>().get(),
                        b.get<C>().get());
            ++bad;
        }
    }
    return bad != 0;
}
"""
    run = _run_program(tmp_path, src, "size_one")
    assert run.returncode == 0, run.stdout
