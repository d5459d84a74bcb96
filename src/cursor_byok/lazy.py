"""Façade names imported on first use, so a command or route that does not need a heavy part of a
package (the proxy's TLS stack, one provider kind's adapter) does not pay for importing it."""
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


__all__ = ["lazy_names"]
