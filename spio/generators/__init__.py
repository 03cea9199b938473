"""Python specs that emit the C++ types a kernel uses, and the `/*@spio ... @spio*/` blocks.

    from spio.generators import Dim, Tensor, CompoundIndex, Constant, dtype, generate
    N, C = Dim(), Dim()
    X = Tensor((N(4), (C / 8)(8)), dtype.uint4)
    header = generate({"N": N, "C": C, "X": X}, title="my_kernel")

`spio.generators.blocks.expand(source, name, scope)` runs the `@spio` blocks of a source. This
package never imports torch.
"""

from spio.generators import dtype
from spio.generators.compound_index import CompoundIndex
from spio.generators.constant import Constant
from spio.generators.dim import Dim, Fold, Module, SizedDim
from spio.generators.dtype import Dtype
from spio.generators.errors import GeneratorError
from spio.generators.fragment import MmaA, MmaB, MmaC
from spio.generators.header import generate, is_spec
from spio.generators.macro import Macro
from spio.generators.spec import Spec
from spio.generators.swizzle import Xor
from spio.generators.tensor import Tensor
from spio.generators.type_alias import Type

__all__ = [
    "CompoundIndex",
    "Constant",
    "Dim",
    "Dtype",
    "Fold",
    "GeneratorError",
    "Macro",
    "MmaA",
    "MmaB",
    "MmaC",
    "Module",
    "SizedDim",
    "Spec",
    "Tensor",
    "Type",
    "Xor",
    "dtype",
    "generate",
    "is_spec",
]
