"""`GeneratorError` lives in `spio.errors` with spio's other error types; this name keeps
`from spio.generators.errors import GeneratorError` working."""

from spio.errors import GeneratorError

__all__ = ["GeneratorError"]
