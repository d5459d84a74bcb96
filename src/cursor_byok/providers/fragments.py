"""Ready JSON for the parts of a model request that repeat from one request to the next.

A conversation's next request carries the same system prompt and tool list (the prompt compiler
hands out the same objects for a mode and model) and the same history messages plus a few new
ones. Each is encoded once, when first sent; later requests splice the stored bytes
(`msgspec.Raw`) and encode only what is new.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from .types import Message

_FIXED_ENTRIES = 32  # (mode, model, MCP set) combinations in use at once, with room to spare

encode = msgspec.json.encode


class Fragments:
    """Per adapter: the wire encoding depends on the provider family."""

    __slots__ = ("_fixed", "_messages")

    def __init__(self) -> None:
        self._messages: dict[int, bytes] = {}  # id(message) → its items, comma-joined
        self._fixed: dict[int, tuple[object, bytes]] = {}  # id(value) → (value, its JSON)

    def fixed(self, value: object, build: Callable[[], Any]) -> bytes:
        """`build()` encoded, for as long as the very same `value` (a system prompt, a tool list)
        comes back. Holding `value` keeps its id from being reused meanwhile."""
        key = id(value)
        entry = self._fixed.get(key)
        if entry is None or entry[0] is not value:
            if len(self._fixed) >= _FIXED_ENTRIES:
                del self._fixed[next(iter(self._fixed))]  # the oldest
            entry = self._fixed[key] = (value, encode(build()))
        return entry[1]

    def messages(
        self, messages: Sequence[Message], items: Callable[[Message], list[dict[str, Any]]], lead: bytes = b""
    ) -> msgspec.Raw:
        """The JSON array of the encoded item `lead` (if any) followed by every message's wire items.
        A message's bytes live as long as the message does (history messages are immutable)."""
        parts = [lead] if lead else []
        cache = self._messages
        for message in messages:
            key = id(message)
            data = cache.get(key)
            if data is None:
                data = cache[key] = b",".join(encode(item) for item in items(message))
                weakref.finalize(message, cache.pop, key, None)
            if data:
                parts.append(data)
        return msgspec.Raw(b"[" + b",".join(parts) + b"]")
