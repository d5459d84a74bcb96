"""Build the compiled hot path (ext/*.pyx) into cursor_byok.hotpath._<name>.

Cython is a build requirement only: a built wheel carries the C extensions and imports on a machine
with neither Cython nor a compiler. Where the extensions cannot be built (no working C compiler,
no Cython), the package installs without them and runs on its pure-Python twins of the same
modules, slower; the build says so in one warning and `cursor-byok doctor` says so after.
"""
from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HOT_MODULES = ("frames", "seqno", "prefix", "wire")
# CI and `make` set it: there a failed build is an error, never a silent fallback.
REQUIRE_COMPILED_ENV = "CURSOR_BYOK_REQUIRE_COMPILED"


def _warn(why: str) -> None:
    sys.stderr.write(
        f"cursor-byok: WARNING: no C compiler could build the compiled hot path ({why}); "
        "installing the pure-Python hot path instead (works, slower; `cursor-byok doctor` shows it)\n"
    )


class OptionalBuildExt(build_ext):
    """build_ext that gives up on all the extensions at the first one that fails, with one warning."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - distutils raises several kinds for a missing compiler
            if os.environ.get(REQUIRE_COMPILED_ENV) == "1":
                raise
            _warn(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'failed'}")
            self.extensions = []

    def build_extension(self, ext: Extension) -> None:
        if not self.extensions:
            return  # an earlier one failed: the twins serve all of them
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            if os.environ.get(REQUIRE_COMPILED_ENV) == "1":
                raise
            _warn(f"{type(exc).__name__} building {ext.name}")
            self.extensions = []
            for built in HOT_MODULES:  # a half-built set would mix compiled and twin modules
                path = self.get_ext_fullpath(f"cursor_byok.hotpath._{built}")
                if os.path.exists(path):
                    os.remove(path)


def _extensions() -> list[Extension]:
    extensions = [
        Extension(f"cursor_byok.hotpath._{name}", [f"ext/{name}.pyx"], extra_compile_args=["-O3"])
        for name in HOT_MODULES
    ]
    try:
        from Cython.Build import cythonize
    except ImportError:
        if os.environ.get(REQUIRE_COMPILED_ENV) == "1":
            raise
        _warn("Cython is not installed")
        return []
    return cythonize(
        extensions,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    )


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
