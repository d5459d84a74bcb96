"""Ready JSON for the parts of a model request that repeat from one request to the next.

A conversation's next request carries the same system prompt and tool list (the prompt compiler
hands out the same objects for a mode and model) and the same history messages plus a few new
ones. Each is encoded once, when first sent; later requests splice the stored bytes
(`msgspec.Raw`) and encode only what is new, within a byte budget: the most recently sent stay.
Messages that come with keys (`KeyedMessages`, a conversation's history) are kept by key, so a
conversation read again after its runtime was let go finds its bytes without decoding a message;
others are kept while the very message object lives.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import msgspec

from .types import KeyedMessages, Message

_FIXED_ENTRIES = 32  # (mode, model, MCP set) combinations in use at once, with room to spare

encode = msgspec.json.encode


MESSAGE_BYTES = 4 * 1024 * 1024
"""What the stored messages may hold in all, per adapter: a few full 200k-token contexts. Beyond the
conversations in use the bytes only wait for a next turn that comes minutes later if at all (keyed
ones outlive their history's runtime for that: its next turn reads the history again); encoding a
message again then costs ~10 µs per 12 KiB."""

ENTRY_BYTES = 416
"""What keeping one message costs beyond its JSON (its key and event id, the entry's tuple, the
bytes object's header, the ordered map's slot), counted in the budget: for one-word turns that is
most of it."""


class _Ref(weakref.ref):  # type: ignore[type-arg]
    __slots__ = ("key",)


class Fragments:
    """Per adapter: the wire encoding depends on the provider family."""

    __slots__ = ("_fixed", "_messages", "_bytes", "budget")

    def __init__(self, budget: int = MESSAGE_BYTES) -> None:
        # a message's key, or id(message) → (None, or a weak reference to the message, its items
        # comma-joined); least recently sent first
        self._messages: OrderedDict[Hashable, tuple[_Ref | None, bytes]] = OrderedDict()
        self._bytes = 0
        self.budget = budget
        self._fixed: dict[int, tuple[object, bytes]] = {}  # id(value) → (value, its JSON)

    @property
    def stored_bytes(self) -> int:
        return self._bytes

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
        A message's bytes stay while they are among the most recently sent within the budget, and,
        unless the messages are keyed, while the message lives (history messages are immutable)."""
        parts = [lead] if lead else []
        cache = self._messages
        keyed = isinstance(messages, KeyedMessages)
        for index in range(len(messages)):
            # A keyed message is read (decoded) only when its bytes are not kept.
            message = None if keyed else messages[index]
            key = messages.key(index) if keyed else id(message)  # type: ignore[attr-defined]
            entry = cache.get(key)
            if entry is not None and (entry[0] is None if keyed else entry[0] is not None and entry[0]() is message):
                cache.move_to_end(key)
                data = entry[1]
            else:
                message = messages[index] if message is None else message
                data = self._store(key, None if keyed else message, b",".join(encode(item) for item in items(message)))
            if data:
                parts.append(data)
        return msgspec.Raw(b"[" + b",".join(parts) + b"]")

    def _store(self, key: Hashable, message: Message | None, data: bytes) -> bytes:
        """Keep `data` under `key`: while `message` lives, if one is given (else by the budget only)."""
        self._drop(key)
        data = bytes(memoryview(data))  # exact: msgspec's output keeps its buffer's spare room (up to half its size again)
        ref = None
        if message is not None:
            ref = _Ref(message, self._gone)
            ref.key = key
        self._messages[key] = (ref, data)
        self._bytes += len(data) + ENTRY_BYTES
        while self._bytes > self.budget:
            self._drop(next(iter(self._messages)))
        return data

    def _drop(self, key: Hashable) -> None:
        entry = self._messages.pop(key, None)
        if entry is not None:
            self._bytes -= len(entry[1]) + ENTRY_BYTES

    def _gone(self, ref: _Ref) -> None:
        """A stored message was freed: its bytes go too (unless its id is stored anew already)."""
        entry = self._messages.get(ref.key)
        if entry is not None and entry[0] is ref:
            self._drop(ref.key)
