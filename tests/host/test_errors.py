"""spio's error types: one module, each pickles with its data, old import paths still work."""

from __future__ import annotations

import inspect
import pickle
import subprocess
import sys

import pytest

import spio.errors as errors

# One instance of every error type, with every field set to something other than its default.
INSTANCES = [
    errors.SpioError("plain message"),
    errors.LibraryNotFoundError("libnvrtc", ["/a/lib", "/b/lib"], hint="pip install nvrtc"),
    errors.CompileError("k.cu(2): error: bad", "int x;\nbad;\n", ("-arch=sm_90",), "k.cu"),
    errors.CompileForbiddenError("k.cu"),
    errors.CudaDriverError(1, "CUDA_ERROR_INVALID_VALUE", "invalid argument", "cuLaunchKernel"),
    errors.OutOfResources("shared memory", 300_000, 232_448, hint="use fewer stages"),
    errors.FallbackDisabledError("matmul", "no CUDA GPU"),
    errors.GeneratorError(
        "'X' uses a Dim that is not among the specs", file="k.cu", line=3, spec="X"
    ),
    errors.GeneratorError("no location"),
    errors.NvrtcError("nvrtcCreateProgram", 5, "NVRTC_ERROR_OUT_OF_MEMORY"),
    errors.ModelFormatError("model format 0, this spio reads 1; retrain with `spio tune train`"),
]


def _error_types() -> set[type]:
    return {
        obj
        for _, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, errors.SpioError) and obj.__module__ == errors.__name__
    }


def test_every_error_type_is_covered_here():
    assert {type(e) for e in INSTANCES} == _error_types()


@pytest.mark.parametrize("err", INSTANCES, ids=lambda e: type(e).__name__)
def test_round_trips_through_pickle(err):
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is type(err)
    assert str(again) == str(err)
    assert vars(again) == vars(err)
    assert isinstance(again, errors.SpioError)


def test_value_errors_stay_value_errors():
    # Callers that catch bad input generically (ValueError) still catch these.
    assert issubclass(errors.GeneratorError, ValueError)
    assert issubclass(errors.ModelFormatError, ValueError)
    assert issubclass(errors.ModelFormatError, errors.SpioError)


def test_generator_error_names_where():
    e = errors.GeneratorError("bad", file="k.cu", line=3, spec="X")
    assert (str(e), e.message, e.file, e.line, e.spec) == ("k.cu:3: bad", "bad", "k.cu", 3, "X")
    assert str(errors.GeneratorError("bad", file="k.cu")) == "k.cu: bad"


def test_old_import_paths_name_the_same_classes():
    from spio.compiler.nvrtc import NvrtcError
    from spio.generators import GeneratorError as FromPackage
    from spio.generators.errors import GeneratorError
    from spio.tune.model import ModelFormatError

    assert GeneratorError is errors.GeneratorError
    assert FromPackage is errors.GeneratorError
    assert NvrtcError is errors.NvrtcError
    assert ModelFormatError is errors.ModelFormatError


def test_errors_module_imports_only_the_standard_library():
    code = (
        "import sys; before = set(sys.modules); import spio.errors;"
        "new = {m.split('.')[0] for m in set(sys.modules) - before};"
        "print(sorted(new - set(sys.stdlib_module_names) - {'spio'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
