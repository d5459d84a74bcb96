"""Build the compiled hot path (ext/*.pyx) into cursor_byok.hotpath._<name>.

Cython is a build requirement only: a built wheel carries the C extensions and
imports on a machine with neither Cython nor a compiler.
"""
from __future__ import annotations

from Cython.Build import cythonize
from setuptools import Extension, setup

HOT_MODULES = ("frames", "seqno", "prefix", "wire")

extensions = [
    Extension(f"cursor_byok.hotpath._{name}", [f"ext/{name}.pyx"], extra_compile_args=["-O3"])
    for name in HOT_MODULES
]

setup(
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    )
)
