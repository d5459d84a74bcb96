"""Façade names imported on first use, so a command or route that does not need a heavy part of a
package (the proxy's TLS stack, one provider kind's adapter) does not pay for importing it; and
the modules a running server imports on first use that it should rather import right after start
(in the background), so that its first turn does not pay for them either."""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_names(package: str, modules: Mapping[str, tuple[str, ...]]) -> Callable[[str], object]:
    """A module `__getattr__` for the façade `package`: each name listed under one of its submodules
    is imported from there on first use (then kept on the package, so this runs once a name)."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


_WARM_AFTER_START: list[tuple[str, str | None]] = []


def warm_after_start(module: str, then: str | None = None) -> None:
    """Name a module that is imported on first use, off the start-up path, but that a running server
    needs in its first turns: `warm_up()` imports it once the server is up, and calls its function
    `then` when given (what its first use would otherwise read, such as package files)."""
    _WARM_AFTER_START.append((module, then))


def warm_up() -> None:
    """Import every module named by `warm_after_start`, calling its `then` (in a worker thread: the
    loop serves on)."""
    for module, then in _WARM_AFTER_START:
        imported = importlib.import_module(module)
        if then is not None:
            getattr(imported, then)()


__all__ = ["lazy_names", "warm_after_start", "warm_up"]
