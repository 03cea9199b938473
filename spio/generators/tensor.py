"""`Tensor(dims, dtype, strides=...)`: a tensor layout with compile-time sizes and strides.

Strides are in elements of the dtype and are always emitted explicitly. By default they are
row-major: the last dim has stride 1 and each other dim's stride is the next dim's stride times
its size. `strides={dim: s}` sets some of them; the dims outside it stay row-major relative to the
dim inside them, so padding a row is one entry:

    Tensor((I(16), K(32)), dtype.half, strides={I: 40})     # rows of 32 halves, padded to 40

A folded layout lists folds and modules of one dim: `Tensor(((K / 8)(4), I(16), (K % 8)(8)), ...)`.
A swizzled layout adds `swizzle=Xor(row, col, bits)` (see swizzle.py); it permutes columns within
each row, so sizes, strides and storage are those of the unswizzled layout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from spio.generators.dim import Dim, DimLike, Fold, Module, SizedDim
from spio.generators.dtype import Dtype
from spio.generators.spec import Names, Section, check_count
from spio.generators.swizzle import Xor
from spio.generators.type_alias import as_dtype

# Emitted declarations longer than this are wrapped one template argument per line.
_LINE = 100


def sized_dims(dims: object, who: str) -> tuple[SizedDim, ...]:
    """Validates a sequence of sized dims: non-empty, each a SizedDim, no dim twice."""
    if isinstance(dims, SizedDim | Dim | Fold | Module) or not isinstance(dims, Iterable):
        raise TypeError(
            f"{who}: dims must be a tuple of sized dims such as (N(4), C(8)), got "
            f"{type(dims).__name__}"
        )
    out = tuple(dims)
    if not out:
        raise ValueError(f"{who}: needs at least one dim")
    for i, d in enumerate(out):
        if isinstance(d, Dim | Fold | Module):
            raise TypeError(
                f"{who}: dims[{i}] ({d.describe()}) has no size; write it with its size, "
                f"e.g. {d.describe()}(16)"
            )
        if not isinstance(d, SizedDim):
            raise TypeError(
                f"{who}: dims[{i}] must be a sized dim such as N(4), got {type(d).__name__} {d!r}"
            )
    for i, d in enumerate(out):
        for j in range(i):
            if out[j].dim == d.dim:
                raise ValueError(
                    f"{who}: dims[{j}] and dims[{i}] are both {d.dim.describe()}; a dim appears "
                    "once (fold it, e.g. K / 8 and K % 8, to split it)"
                )
    return out


def _row_major(dims: tuple[SizedDim, ...], given: Mapping[DimLike, int]) -> tuple[int, ...]:
    strides = [0] * len(dims)
    inner = 1  # the stride the next dim outward gets by default
    for i in reversed(range(len(dims))):
        strides[i] = given.get(dims[i].dim, inner)
        inner = strides[i] * dims[i].size
    return tuple(strides)


@dataclass(frozen=True, slots=True, init=False)
class Tensor:
    """A tensor layout: dims with sizes and strides (in elements), and an element type.

    Attributes:
        dims: the sized dims, outermost first.
        dtype: the element type.
        strides: one stride per dim, in elements.
        swizzle: the swizzles of the layout, in the order given (usually none or one).
    """

    dims: tuple[SizedDim, ...]
    dtype: Dtype
    strides: tuple[int, ...]
    swizzle: tuple[Xor, ...]
    section: ClassVar[Section] = "tensors"

    def __init__(
        self,
        dims: Iterable[SizedDim],
        dtype: object,
        strides: Mapping[DimLike, int] | None = None,
        swizzle: Xor | Iterable[Xor] | None = None,
    ):
        """Declares a tensor layout.

        Args:
            dims: sized dims, outermost first, e.g. `(N(4), H(56), W(56), (C / 8)(8))`.
            dtype: a `dtype` value (`dtype.half8`) or a `Type` spec.
            strides: optional `{dim: stride}` for some dims (in elements, 0 broadcasts); keys are
                the dims as written in `dims`, without sizes. Other dims are row-major inside-out.
            swizzle: an `Xor` (or several) over two of the tensor's dims.

        Raises:
            TypeError, ValueError: the rule broken and how to fix it.
        """
        dims_t = sized_dims(dims, "Tensor")
        dt = as_dtype(dtype, "Tensor dtype")
        given: dict[DimLike, int] = {}
        if strides is not None:
            if not isinstance(strides, Mapping):
                raise TypeError(
                    f"Tensor strides must be a dict {{dim: stride}}, e.g. {{N: 64}}, got "
                    f"{type(strides).__name__}"
                )
            ours = [d.dim for d in dims_t]
            for key, value in strides.items():
                if isinstance(key, SizedDim):
                    raise TypeError(
                        f"Tensor strides: key {key.describe()} has a size; key by the dim alone "
                        f"({key.dim.describe()})"
                    )
                if key not in ours:
                    listed = ", ".join(d.describe() for d in ours)
                    what = key.describe() if isinstance(key, Dim | Fold | Module) else repr(key)
                    raise ValueError(
                        f"Tensor strides: {what} is not one of the tensor's dims ({listed}); "
                        "key strides by the dims as written in dims"
                    )
                given[key] = check_count(value, f"Tensor strides[{key.describe()}]", minimum=0)
        object.__setattr__(self, "dims", dims_t)
        object.__setattr__(self, "dtype", dt)
        object.__setattr__(self, "strides", _row_major(dims_t, given))
        object.__setattr__(self, "swizzle", _swizzles(dims_t, swizzle))

    @property
    def storage_size(self) -> int:
        """Elements the tensor spans, padding included: max over dims of size * stride, >= 1.

        The same rule as the C++ `Tensor::storage_size()`.
        """
        return max(1, *(d.size * s for d, s in zip(self.dims, self.strides, strict=True)))

    @property
    def nbytes(self) -> int:
        """Bytes of storage: storage_size * dtype.nbytes (e.g. a shared-memory buffer)."""
        return self.storage_size * self.dtype.nbytes

    def size(self, dim: DimLike) -> int:
        """The size of `dim` in this tensor."""
        return self.dims[self._index(dim)].size

    def stride(self, dim: DimLike) -> int:
        """The stride of `dim` in this tensor, in elements."""
        return self.strides[self._index(dim)]

    def _index(self, dim: DimLike) -> int:
        for i, d in enumerate(self.dims):
            if d.dim == dim:
                return i
        listed = ", ".join(d.dim.describe() for d in self.dims)
        raise ValueError(f"Tensor: no dim {dim!r} among ({listed})")

    def deps(self) -> tuple:
        return tuple(d.dim for d in self.dims)

    def emit(self, name: str, names: Names) -> str:
        return wrap_using(name, "spio::Tensor", self._args(names))

    def inline(self, names: Names) -> str:
        return f"spio::Tensor<{', '.join(self._args(names))}>"

    def _args(self, names: Names) -> list[str]:
        extents = [
            f"spio::Extent<{names.spell(d.dim)}, {d.size}, {s}>"
            for d, s in zip(self.dims, self.strides, strict=True)
        ]
        return [self.dtype.cpp, *extents, *(x.spell(names) for x in self.swizzle)]


def _swizzles(dims: tuple[SizedDim, ...], swizzle: object) -> tuple[Xor, ...]:
    if swizzle is None:
        return ()
    items = (swizzle,) if isinstance(swizzle, Xor) else swizzle
    if not isinstance(items, Iterable):
        raise TypeError(f"Tensor swizzle must be an Xor (or a tuple of them), got {swizzle!r}")
    out = tuple(items)
    sizes = {d.dim: d.size for d in dims}
    listed = ", ".join(d.dim.describe() for d in dims)
    for x in out:
        if not isinstance(x, Xor):
            raise TypeError(f"Tensor swizzle must be Xor(row, col, bits), got {x!r}")
        for what, d in (("row", x.row), ("col", x.col)):
            if d not in sizes:
                raise ValueError(
                    f"Tensor swizzle {x.describe()}: its {what} {d.describe()} is not one of the "
                    f"tensor's dims ({listed}); swizzle dims exactly as written in dims"
                )
        if sizes[x.col] % (1 << x.bits):
            raise ValueError(
                f"Tensor swizzle {x.describe()}: the col size {sizes[x.col]} must be a multiple "
                f"of 2**bits = {1 << x.bits} (the XOR permutes within aligned groups); use "
                f"bits <= log2 of the col size"
            )
    return out


def wrap_using(name: str, template: str, args: list[str]) -> str:
    """`using name = template<args...>;` on one line, or one argument per line when too long."""
    line = f"using {name} = {template}<{', '.join(args)}>;"
    if len(line) <= _LINE:
        return line
    body = ",\n".join(f"    {a}" for a in args)
    return f"using {name} = {template}<\n{body}>;"
