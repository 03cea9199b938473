"""spio's exception types, all in one place. Every error carries its data, renders a fix hint,
and pickles (a process pool sends them back from its workers).

Each layer raises its own from here: `GeneratorError` (generators), `CompileError`, `NvrtcError`
and `CompileForbiddenError` (compiler), `CudaDriverError` and `LibraryNotFoundError` (cuda),
`OutOfResources` (kernels), `FallbackDisabledError` (functional), `ModelFormatError` (tune).
This module imports only the standard library, so every layer may import it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence


class SpioError(Exception):
    """Base class of every error spio raises on purpose."""


class LibraryNotFoundError(SpioError):
    """A shared library or header directory could not be found; lists every place searched."""

    def __init__(self, what: str, searched: Sequence[str], hint: str = ""):
        self.what = what
        self.searched = tuple(searched)
        self.hint = hint
        lines = [f"could not find {what}. Searched, in order:"]
        lines += [f"  - {s}" for s in self.searched] or ["  (nothing)"]
        if hint:
            lines.append(hint)
        super().__init__("\n".join(lines))

    def __reduce__(self):
        return (type(self), (self.what, self.searched, self.hint))


_LINE_REF = re.compile(r"\((\d+)\): (?:error|warning)")


class CompileError(SpioError):
    """NVRTC rejected a source. Holds the log, the options and the source; str() shows the
    numbered source around each line the log complains about."""

    def __init__(self, log: str, source: str, options: Sequence[str], name: str):
        self.log = log
        self.source = source
        self.options = tuple(options)
        self.name = name
        super().__init__(self._render(context=3))

    def error_lines(self) -> list[int]:
        """1-based line numbers the log names (in `name`), in order, without repeats."""
        seen: list[int] = []
        for m in _LINE_REF.finditer(self.log):
            n = int(m.group(1))
            if n not in seen:
                seen.append(n)
        return seen

    def _render(self, context: int) -> str:
        out = [f"NVRTC failed to compile {self.name}:", self.log.rstrip()]
        lines = self.source.splitlines()
        wanted: set[int] = set()
        for n in self.error_lines()[:5]:
            wanted.update(range(max(1, n - context), min(len(lines), n + context) + 1))
        if wanted:
            out.append(f"--- {self.name} (around the failing lines) ---")
            prev = None
            for n in sorted(wanted):
                if prev is not None and n != prev + 1:
                    out.append("   ...")
                out.append(f"{n:5d} | {lines[n - 1]}")
                prev = n
        out.append("options: " + " ".join(self.options))
        return "\n".join(out)

    def dump(self, f) -> None:
        """Writes the whole numbered source, the options and the log to a text stream."""
        for n, line in enumerate(self.source.splitlines(), 1):
            f.write(f"{n:5d} | {line}\n")
        f.write("options: " + " ".join(self.options) + "\n")
        f.write(self.log + "\n")

    def __reduce__(self):
        return (type(self), (self.log, self.source, self.options, self.name))


class CompileForbiddenError(SpioError):
    """A compile was requested while SPIO_ASSERT_NO_COMPILE=1."""

    def __init__(self, name: str):
        self.name = name
        super().__init__(
            f"compile of {name} requested while SPIO_ASSERT_NO_COMPILE=1; warm the cache first "
            "(run once without the switch) or unset it"
        )

    def __reduce__(self):
        return (type(self), (self.name,))


class CudaDriverError(SpioError):
    """A CUDA Driver API call returned a non-zero CUresult."""

    def __init__(self, status: int, name: str, message: str, call: str = ""):
        self.status = status
        self.name = name
        self.message = message
        self.call = call
        where = f"{call}: " if call else ""
        super().__init__(f"{where}{name} ({status}): {message}")

    def __reduce__(self):
        return (type(self), (self.status, self.name, self.message, self.call))


class OutOfResources(SpioError):
    """A kernel config needs more of a device resource than the device has."""

    def __init__(self, resource: str, required: int, limit: int, hint: str = ""):
        self.resource = resource
        self.required = required
        self.limit = limit
        self.hint = hint
        msg = f"{resource}: required {required}, limit {limit}."
        super().__init__(f"{msg} {hint}".strip())

    def __reduce__(self):
        return (type(self), (self.resource, self.required, self.limit, self.hint))


class FallbackDisabledError(SpioError):
    """An op would fall back to PyTorch, but SPIO_DISABLE_FALLBACK=1."""

    def __init__(self, op: str, reason: str):
        self.op = op
        self.reason = reason
        super().__init__(
            f"spio {op}: would fall back to PyTorch because {reason}, but SPIO_DISABLE_FALLBACK=1; "
            "run on a CUDA GPU of compute capability 8.0 or newer, or unset SPIO_DISABLE_FALLBACK"
        )

    def __reduce__(self):
        return (type(self), (self.op, self.reason))


class GeneratorError(SpioError, ValueError):
    """A spec collection or an `@spio` block could not become a header; says where.

    `file` and `line` locate the failing line of an `@spio` block in its source file; `spec` names
    the spec (mapping key or block variable) the problem is about. Any of them may be None. The
    message says what rule was broken and how to fix it. Subclasses ValueError, so callers that
    treat bad input generically still catch it.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        spec: str | None = None,
    ):
        self.message = message
        self.file = file
        self.line = line
        self.spec = spec
        if file is not None and line is not None:
            text = f"{file}:{line}: {message}"
        elif file is not None:
            text = f"{file}: {message}"
        else:
            text = message
        super().__init__(text)

    def __reduce__(self):
        return (
            _rebuild_generator_error,
            (type(self), self.message, self.file, self.line, self.spec),
        )


def _rebuild_generator_error(cls, message, file, line, spec):
    return cls(message, file=file, line=line, spec=spec)


class NvrtcError(SpioError):
    """An NVRTC call other than the compile itself failed (bad option, out of memory...)."""

    def __init__(self, call: str, status: int, message: str):
        self.call = call
        self.status = status
        self.message = message
        super().__init__(f"{call} failed with NVRTC status {status}: {message}")

    def __reduce__(self):
        return (type(self), (self.call, self.status, self.message))


class ModelFormatError(SpioError, ValueError):
    """A performance-model file of another format version, or whose feature list the kernel
    family no longer provides; the message says to retrain (`spio tune train`). Subclasses
    ValueError, as before it was a SpioError."""
