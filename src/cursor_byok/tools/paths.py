"""Path handling for paths the model writes: relative paths are taken from the workspace root.

The IDE may run on Windows while this server runs elsewhere, so the root's own style decides
which path flavour applies.
"""
from __future__ import annotations

import ntpath
import posixpath
import re

__all__ = ["resolve_path", "join_path"]

_WINDOWS_ROOT = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")


def _flavour(path: str):
    return ntpath if _WINDOWS_ROOT.match(path) else posixpath


def _is_absolute(path: str) -> bool:
    return path.startswith("/") or bool(_WINDOWS_ROOT.match(path)) or path.startswith("~")


def resolve_path(path: str, workspace_root: str | None) -> str:
    """`path` unchanged when absolute or when no root is known, else joined onto the root."""
    if not path or _is_absolute(path) or not workspace_root:
        return path
    flavour = _flavour(workspace_root)
    return flavour.normpath(flavour.join(workspace_root, path))


def join_path(folder: str, name: str) -> str:
    return _flavour(folder).join(folder, name)
