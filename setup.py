"""Builds spio's one compiled part: the Cython binding of the CUDA Driver API (spio.cuda).

No CUDA toolkit is needed: the binding declares the few CUDA types it uses and opens libcuda with
dlopen at first use. Everything else (package data, metadata) is in pyproject.toml.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

EXTENSIONS = [
    Extension(
        f"spio.cuda.{name}",
        [f"spio/cuda/{name}.pyx"],
        libraries=["dl"],  # dlopen/dlsym live in libdl before glibc 2.34 (a stub after)
    )
    for name in ("driver", "args", "module")
]

setup(
    ext_modules=cythonize(
        EXTENSIONS,
        compiler_directives={"language_level": 3, "embedsignature": True},
        build_dir="build/cython",  # generated .c files stay out of the source tree
    ),
)
