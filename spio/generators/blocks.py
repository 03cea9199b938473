"""`/*@spio ... @spio*/` blocks: Python inside a C++/CUDA source that declares the kernel's specs.

    /*@spio
    I = Dim()
    K = Dim()
    A = Tensor((I(16), K(32)), dtype.float)
    @spio*/

`expand(source, name, scope)` runs every block of a source in order, in one shared namespace that
holds the generator names (`Dim`, `Tensor`, `dtype`, ...) and `scope` (what a kernel factory
passes: specs such as tile dims, and plain values such as config fields). The specs bound to
names not starting with `_` after the last block, together with the specs in `scope`, become the
generated header. An exception in a block becomes a GeneratorError at `<name>:<line>` of the
source line that raised it.
"""

from __future__ import annotations

import builtins
import re
import textwrap
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType

from spio import generators
from spio.generators.dim import message_names
from spio.generators.errors import GeneratorError
from spio.generators.header import generate, is_spec

OPEN = "/*@spio"
CLOSE = "@spio*/"


@dataclass(frozen=True, slots=True)
class Block:
    """One block: its Python text (between the markers) and the 1-based source line of `/*@spio`.

    Line k of `text` (1-based) is line `line + k - 1` of the source.
    """

    text: str
    line: int


def find_blocks(source: str, name: str = "kernel.cu") -> list[Block]:
    """Every `/*@spio ... @spio*/` block of `source`, in order.

    Raises:
        GeneratorError: a block is not closed, or a block opens inside another.
    """
    blocks: list[Block] = []
    pos = 0
    while (start := source.find(OPEN, pos)) != -1:
        line = source.count("\n", 0, start) + 1
        body = start + len(OPEN)
        end = source.find(CLOSE, body)
        if end == -1:
            raise GeneratorError(
                f"@spio block opened here is never closed; end it with {CLOSE}",
                file=name,
                line=line,
            )
        nested = source.find(OPEN, body, end)
        if nested != -1:
            raise GeneratorError(
                f"@spio block opens inside the block opened at line {line}; close that one first "
                f"with {CLOSE}",
                file=name,
                line=source.count("\n", 0, nested) + 1,
            )
        blocks.append(Block(source[body:end], line))
        pos = end + len(CLOSE)
    return blocks


def generator_names() -> dict[str, object]:
    """The names every block sees: `spio.generators.__all__`."""
    return {n: getattr(generators, n) for n in generators.__all__}


def expand(
    source: str, name: str = "kernel.cu", scope: Mapping[str, object] | None = None
) -> str | None:
    """Runs the `@spio` blocks of `source` and returns their generated header.

    Args:
        source: the C++/CUDA source text.
        name: the source's file name, used in the header title and in error locations.
        scope: extra names for the blocks (a kernel factory's specs and config values); the specs
            among them are declared in the header too.

    Returns:
        The header text, or None when the source has no blocks and `scope` is empty.

    Raises:
        GeneratorError: at `<name>:<line>` when a block fails or its specs cannot be generated.
        TypeError, ValueError: `scope` is not a mapping of identifiers, or shadows a generator name.
    """
    blocks = find_blocks(source, name)
    if not blocks and not scope:
        return None
    namespace = _namespace(scope or {})
    for block in blocks:
        _run(block, namespace, source, name)
    specs = {k: v for k, v in namespace.items() if not k.startswith("_") and is_spec(v)}
    try:
        return generate(specs, title=name)
    except GeneratorError as e:
        line = _assignment_line(blocks, e.spec) if e.spec else None
        from_scope = line is None and scope is not None and e.spec in scope
        where = f" (spec {e.spec!r} comes from scope)" if from_scope else ""
        raise GeneratorError(e.message + where, file=name, line=line, spec=e.spec) from None


def _namespace(scope: Mapping[str, object]) -> dict[str, object]:
    if not isinstance(scope, Mapping):
        raise TypeError(f"expand(scope): scope must be a mapping name -> value, got {scope!r}")
    names = generator_names()
    for key in scope:
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(f"expand(scope): key {key!r} is not a Python identifier")
        if key in names:
            raise ValueError(
                f"expand(scope): key {key!r} would hide the generator name {key}; rename it"
            )
    return {"__builtins__": builtins, "__name__": "__spio_block__", **names, **scope}


def _run(block: Block, namespace: dict[str, object], source: str, name: str) -> None:
    # Pad with newlines so Python's line numbers are the source file's line numbers.
    code_text = "\n" * (block.line - 1) + textwrap.dedent(block.text)
    try:
        code = compile(code_text, name, "exec", dont_inherit=True)
        with message_names(namespace):
            exec(code, namespace)
    except Exception as e:
        line = _failing_line(e, name) or block.line
        lines = source.split("\n")
        text = lines[line - 1].strip() if line <= len(lines) else ""
        kind = type(e).__name__
        detail = e.msg if isinstance(e, SyntaxError) else str(e)
        raise GeneratorError(
            f"error in @spio block: {kind}: {detail}\n    {line} | {text}", file=name, line=line
        ) from e


def _failing_line(e: Exception, name: str) -> int | None:
    """The source line of the innermost traceback frame that runs block code."""
    if isinstance(e, SyntaxError) and e.filename == name and e.lineno:
        return e.lineno
    tb: TracebackType | None = e.__traceback__
    line = None
    for frame, lineno in traceback.walk_tb(tb):
        if frame.f_code.co_filename == name:
            line = lineno
    return line


def _assignment_line(blocks: list[Block], spec: str) -> int | None:
    """The source line where a block binds `spec` (`spec = ...`), the last one if several."""
    pattern = re.compile(rf"^\s*{re.escape(spec)}\s*(?::[^=]*)?=(?!=)")
    found = None
    for block in blocks:
        for k, text in enumerate(block.text.split("\n")):
            if pattern.match(text):
                found = block.line + k
    return found
