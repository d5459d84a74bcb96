"""Minimal textual edits of a JSONC document (JSON with comments and trailing commas).

VS Code-style settings files are hand-edited: comments, ordering and formatting belong to the
user. So we never parse-and-dump. `parse_top_level` validates the whole document and records the
spans of the top-level members; `set_value` replaces one value's span, `insert` adds a member
after the last one (matching indentation), and `remove` deletes a member so that removing what
`insert` added gives back the original bytes.
"""
from __future__ import annotations

import json
import re
from typing import Any

import msgspec

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}
_ESCAPES = set('"\\/bfnrtu')


class JsoncError(ValueError):
    """The text is not a JSONC document with an object at the top; says where."""

    def __init__(self, message: str, text: str, pos: int) -> None:
        line = text.count("\n", 0, pos) + 1
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        super().__init__(f"line {line}, column {column}: {message}")
        self.line = line
        self.column = column


class Member(msgspec.Struct, frozen=True):
    key: str
    key_start: int  # the key's opening quote
    value_start: int
    value_end: int  # one past the value's last character
    comma: int | None  # the separator after the value, if any


class TopLevel(msgspec.Struct, frozen=True):
    open_brace: int
    close_brace: int
    members: tuple[Member, ...]

    def find(self, key: str) -> list[int]:
        """Indexes of the members with this key (duplicates: the last one is the effective one)."""
        return [i for i, m in enumerate(self.members) if m.key == key]


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, message: str, pos: int | None = None) -> JsoncError:
        return JsoncError(message, self.text, self.pos if pos is None else pos)

    def skip(self) -> None:
        """Whitespace and comments."""
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c in " \t\r\n\ufeff":
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise self.error("unterminated block comment")
                self.pos = end + 2
            else:
                return

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def string(self) -> str:
        start = self.pos
        text, n = self.text, len(self.text)
        i = start + 1
        while i < n:
            c = text[i]
            if c == '"':
                self.pos = i + 1
                return json.loads(text[start : i + 1])
            if c == "\\":
                if i + 1 >= n or text[i + 1] not in _ESCAPES:
                    raise self.error("invalid escape in string", i)
                if text[i + 1] == "u" and not re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
                    raise self.error("invalid \\u escape in string", i)
                i += 2
                continue
            if c < " ":
                raise self.error("control character or newline inside a string", i)
            i += 1
        raise self.error("unterminated string", start)

    def value(self, depth: int = 0) -> Any:
        if depth > 200:
            raise self.error("nesting too deep")
        c = self.peek()
        if c == "{":
            return self.obj(depth)
        if c == "[":
            return self.array(depth)
        if c == '"':
            return self.string()
        match = _NUMBER.match(self.text, self.pos)
        if match and match.end() > self.pos:
            self.pos = match.end()
            return json.loads(match.group())
        for word, literal in _LITERALS.items():
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return literal
        raise self.error("expected a value" if c else "unexpected end of file")

    def obj(self, depth: int, members: list[Member] | None = None) -> dict[str, Any]:
        self.pos += 1  # '{'
        result: dict[str, Any] = {}
        while True:
            self.skip()
            if self.peek() == "}":
                self.pos += 1
                return result
            if self.peek() != '"':
                raise self.error("expected a string key or '}'")
            key_start = self.pos
            key = self.string()
            self.skip()
            if self.peek() != ":":
                raise self.error("expected ':' after the key")
            self.pos += 1
            self.skip()
            value_start = self.pos
            result[key] = self.value(depth + 1)
            value_end = self.pos
            self.skip()
            comma: int | None = None
            if self.peek() == ",":
                comma = self.pos
                self.pos += 1
            elif self.peek() != "}":
                raise self.error("expected ',' or '}'")
            if members is not None:
                members.append(Member(key, key_start, value_start, value_end, comma))

    def array(self, depth: int) -> list[Any]:
        self.pos += 1  # '['
        result: list[Any] = []
        while True:
            self.skip()
            if self.peek() == "]":
                self.pos += 1
                return result
            result.append(self.value(depth + 1))
            self.skip()
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "]":
                raise self.error("expected ',' or ']'")


def parse_top_level(text: str) -> TopLevel:
    """Validate the whole document (one object, comments and trailing commas allowed)."""
    parser = _Parser(text)
    parser.skip()
    if parser.peek() != "{":
        raise parser.error("the settings file must contain one JSON object")
    open_brace = parser.pos
    members: list[Member] = []
    parser.obj(0, members)
    close_brace = parser.pos - 1
    parser.skip()
    if parser.pos != len(text):
        raise parser.error("unexpected text after the closing '}'")
    return TopLevel(open_brace, close_brace, tuple(members))


def loads(text: str) -> Any:
    """Decode a JSONC value (a whole document or one value's text) to Python."""
    parser = _Parser(text)
    parser.skip()
    value = parser.value()
    parser.skip()
    if parser.pos != len(text):
        raise parser.error("unexpected text after the value")
    return value


def _same_line_end(text: str, pos: int) -> int:
    """Skip spaces and comments that end on this line; stop at a newline or anything else.

    Insertions happen here so that a comment trailing the previous member stays on its line.
    """
    n = len(text)
    solid = pos  # just after the last thing that is not blank: where to stop before a token
    while pos < n:
        c = text[pos]
        if c in " \t":
            pos += 1
        elif c in "\r\n":
            return pos
        elif text.startswith("//", pos):
            end = text.find("\n", pos)
            end = n if end < 0 else end
            if end > pos and text[end - 1] == "\r":
                end -= 1
            return end
        elif text.startswith("/*", pos):
            end = text.find("*/", pos + 2)
            if end < 0 or "\n" in text[pos:end]:
                return solid
            pos = solid = end + 2
        else:
            return solid
    return pos


def newline_of(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _line_indent(text: str, pos: int) -> str | None:
    start = text.rfind("\n", 0, pos) + 1
    prefix = text[start:pos].lstrip("\ufeff")
    return prefix if prefix.strip(" \t") == "" else None


def indent_of(text: str, doc: TopLevel) -> str:
    for member in reversed(doc.members):
        indent = _line_indent(text, member.key_start)
        if indent is not None:
            return indent
    return "    "


def value_text(text: str, key: str) -> str | None:
    """The raw text of the effective (last) value for `key`, or None."""
    doc = parse_top_level(text)
    found = doc.find(key)
    if not found:
        return None
    m = doc.members[found[-1]]
    return text[m.value_start : m.value_end]


def set_value(text: str, key: str, raw_value: str) -> str:
    """Replace the value of `key` (its last occurrence) or insert the member if missing."""
    loads(raw_value)  # never write something that is not a value
    doc = parse_top_level(text)
    found = doc.find(key)
    if not found:
        return insert(text, key, raw_value, doc)
    m = doc.members[found[-1]]
    return text[: m.value_start] + raw_value + text[m.value_end :]


def insert(text: str, key: str, raw_value: str, doc: TopLevel | None = None) -> str:
    """Add `"key": value` as the last member, on its own line, with the file's indentation."""
    doc = doc or parse_top_level(text)
    nl = newline_of(text)
    indent = indent_of(text, doc)
    entry = json.dumps(key, ensure_ascii=False) + ": " + raw_value
    if not doc.members:
        inner = text[doc.open_brace + 1 : doc.close_brace]
        if inner.strip(" \t") == "":  # `{}` or `{ }`: open it up over lines
            return text[: doc.open_brace + 1] + nl + indent + entry + nl + text[doc.close_brace :]
        pos = _same_line_end(text, doc.open_brace + 1)
        return text[:pos] + nl + indent + entry + text[pos:]
    last = doc.members[-1]
    if last.comma is not None:  # the file uses a trailing comma: keep the style
        pos = _same_line_end(text, last.comma + 1)
        return text[:pos] + nl + indent + entry + "," + text[pos:]
    pos = _same_line_end(text, last.value_end)
    return text[: last.value_end] + "," + text[last.value_end : pos] + nl + indent + entry + text[pos:]


def remove(text: str, key: str) -> str:
    """Remove every member named `key` (last first). The exact inverse of `insert`."""
    while True:
        doc = parse_top_level(text)
        found = doc.find(key)
        if not found:
            return text
        text = _remove_member(text, doc, found[-1])


def _remove_member(text: str, doc: TopLevel, index: int) -> str:
    member = doc.members[index]
    prev = doc.members[index - 1] if index else None
    if prev is None:
        start = _same_line_end(text, doc.open_brace + 1)
    else:
        assert prev.comma is not None  # members are comma-separated
        start = _same_line_end(text, prev.comma + 1)
    if member.comma is not None:
        return text[:start] + text[member.comma + 1 :]
    if prev is None:
        return text[:start] + text[member.value_end :]
    # The last member had no trailing comma: the previous member's comma must go too.
    return text[: prev.comma] + text[prev.comma + 1 : start] + text[member.value_end :]
