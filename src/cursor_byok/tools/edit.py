"""StrReplace computed on the server: exact match on the file text the IDE returned."""
from __future__ import annotations

import re

import msgspec

__all__ = ["EditProblem", "Replacement", "apply_str_replace", "count_lines"]

_BARE_LF = re.compile(r"(?<!\r)\n")


class EditProblem(Exception):
    """The replacement cannot be applied; the message is shown to the model."""


class Replacement(msgspec.Struct, frozen=True):
    text: str
    occurrences: int
    lines_added: int
    lines_removed: int


def count_lines(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _uses_crlf(text: str) -> bool:
    crlf = text.count("\r\n")
    return crlf > 0 and crlf == text.count("\n")


def apply_str_replace(original: str, old: str, new: str, *, replace_all: bool, path: str) -> Replacement:
    """Replace `old` with `new` in `original`.

    Matching is exact. One allowance: when the file uses CRLF throughout and `old` has bare LF
    line breaks (as models write them), the CRLF form of `old` is matched instead; in a CRLF
    file `new`'s bare LFs become CRLF so the file keeps one line-ending style.
    """
    if old == "":
        raise EditProblem("old_string must not be empty")
    if old == new:
        raise EditProblem("new_string is identical to old_string; nothing to change")
    crlf_file = _uses_crlf(original)
    occurrences = original.count(old)
    if occurrences == 0 and crlf_file and "\n" in old:
        crlf_old = _BARE_LF.sub("\r\n", old)
        if crlf_old != old:
            old = crlf_old
            occurrences = original.count(old)
    if occurrences == 0:
        raise EditProblem(f"old_string not found in {path}")
    if occurrences > 1 and not replace_all:
        raise EditProblem(
            f"old_string appears {occurrences} times in {path}; add context or set replace_all"
        )
    if crlf_file:
        new = _BARE_LF.sub("\r\n", new)
    replaced = occurrences if replace_all else 1
    text = original.replace(old, new) if replace_all else original.replace(old, new, 1)
    return Replacement(
        text=text,
        occurrences=replaced,
        lines_added=replaced * count_lines(new),
        lines_removed=replaced * count_lines(old),
    )
