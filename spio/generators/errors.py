"""GeneratorError: a spec collection or an `@spio` block could not become a header."""

from __future__ import annotations

from spio.errors import SpioError


class GeneratorError(SpioError, ValueError):
    """A problem found while generating a header, with where it happened.

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
        return (_rebuild, (type(self), self.message, self.file, self.line, self.spec))


def _rebuild(cls, message, file, line, spec):
    return cls(message, file=file, line=line, spec=spec)
