"""Ready JSON for the parts of a model request that repeat from one request to the next.

A conversation's next request carries the same system prompt and tool list (the prompt compiler
hands out the same objects for a mode and model) and the same history messages plus a few new
ones. Each is encoded once, when first sent; later requests splice the stored bytes
(`msgspec.Raw`) and encode only what is new, within a byte budget: the most recently sent stay.
Messages that come with keys (`KeyedMessages`, a conversation's history) are kept per source as
the last request's messages, a view of that request's bytes, with the first and last of their keys:
the next request of that conversation that starts with those messages (two keys compared, however
long the history) is those bytes plus the new messages, encoded alone, copied into the request's
bytes once (`encode`); a conversation read again after its runtime was let go finds its bytes
without decoding a message, and what is kept does not grow by an object per message. Other
messages are kept while the very message object lives.
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

Items = Callable[[Message, msgspec.Raw | None], list[dict[str, Any]]]
"""An adapter's wire items of one message; the second argument is the message's lone text as JSON
when the messages hold it so (`KeyedMessages.with_text`), to put where the text goes."""


MESSAGE_BYTES = 4 * 1024 * 1024
"""What the stored messages may hold in all, per adapter: a few full 200k-token contexts. Beyond the
conversations in use the bytes only wait for a next turn that comes minutes later if at all (keyed
ones outlive their history's runtime for that: its next turn reads the history again); encoding a
message again then costs ~10 µs per 12 KiB."""

ENTRY_BYTES = 416
"""What keeping one message costs beyond its JSON (its key and event id, the entry's tuple, the
bytes object's header, the ordered map's slot), counted in the budget: for one-word turns that is
most of it."""


PREFIX_BYTES = 512
"""What keeping one source's prefix costs beyond its array's JSON (the record, its two keys, the
map's slot)."""


class _Prefix:
    """One source's messages as last sent: `body` holds the first `count` messages' items,
    comma-joined: a view of the last request's bytes (`size` of them) where the array is most of
    them, else a copy; `first` and `last` are the keys of the first and the count-th message: a
    later request of the source whose keys there are the same starts with those very messages (see
    `KeyedMessages`)."""

    __slots__ = ("first", "last", "body", "count", "size")

    def __init__(self, messages: KeyedMessages, body: bytes | memoryview, size: int) -> None:
        self.count = len(messages)
        self.first, self.last = (messages.key(0), messages.key(self.count - 1)) if self.count else ("", "")
        self.body, self.size = body, size

    def starts(self, messages: KeyedMessages) -> bool:
        count = self.count
        return len(messages) >= count and (not count or (messages.key(count - 1) == self.last and messages.key(0) == self.first))

    def cost(self) -> int:
        return self.size + PREFIX_BYTES


class Array:
    """A keyed messages' JSON array as a request body holds it until `Fragments.encode` copies it
    into the request's bytes: its pieces (the lead, the kept prefix's view, the new messages' items)
    are copied there once, and the source's next prefix is a view of those bytes."""

    __slots__ = ("messages", "pieces")

    def __init__(self, messages: KeyedMessages, pieces: list[bytes | memoryview]) -> None:
        self.messages, self.pieces = messages, pieces


_MARK = b"\x00"  # where an array goes: JSON text holds no NUL byte (a string escapes it)


class _Ref(weakref.ref):  # type: ignore[type-arg]
    __slots__ = ("key",)


class Fragments:
    """Per adapter: the wire encoding depends on the provider family."""

    __slots__ = ("_fixed", "_messages", "_prefixes", "_bytes", "budget")

    def __init__(self, budget: int = MESSAGE_BYTES) -> None:
        # id(message) → (a weak reference to the message, its items comma-joined); least recently sent first
        self._messages: OrderedDict[int, tuple[_Ref, bytes]] = OrderedDict()
        self._prefixes: OrderedDict[Hashable, _Prefix] = OrderedDict()  # by source, least recently sent first
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
        self, messages: Sequence[Message], items: Items, lead: bytes = b""
    ) -> msgspec.Raw | Array:
        """The JSON array of the encoded item `lead` (if any) followed by every message's wire items.
        Keyed messages: the source's kept prefix and the rest encoded, as an `Array` that `encode`
        copies into the request's bytes (an adapter puts it at its body's top level). Others: a message's bytes stay
        while they are among the most recently sent within the budget and the message lives
        (history messages are immutable)."""
        if isinstance(messages, KeyedMessages):
            return self._keyed(messages, items, lead)
        parts = [lead] if lead else []
        cache = self._messages
        for message in messages:
            key = id(message)
            entry = cache.get(key)
            if entry is not None and entry[0]() is message:
                cache.move_to_end(key)
                data = entry[1]
            else:
                data = self._store(key, message, _items_json(message, None, items))
            if data:
                parts.append(data)
        return msgspec.Raw(b"[" + b",".join(parts) + b"]")

    def _keyed(self, messages: KeyedMessages, items: Items, lead: bytes) -> Array:
        kept = self._prefixes.pop(messages.source(), None)
        start = 0
        parts: list[bytes | memoryview] = []
        if kept is not None:
            self._bytes -= kept.cost()
            if kept.starts(messages):
                start = kept.count
                if kept.body:
                    parts.append(kept.body)
        with_text = messages.with_text
        for index in range(start, len(messages)):
            data = _items_json(*with_text(index), items)
            if data:
                parts.append(data)
        pieces: list[bytes | memoryview] = [b"[", lead, b"," if lead and parts else b""]
        for part in parts:
            pieces += (part, b",")
        if parts:
            pieces.pop()
        pieces.append(b"]")
        return Array(messages, pieces)

    def encode(self, body: dict[str, Any]) -> bytes:
        """The request body's JSON, a keyed messages' array in it (at its top level) copied in once
        with the rest; that source's next prefix is a view of the bytes returned."""
        for key, array in body.items():  # a loop, not a generator's frame and steps per request
            if type(array) is Array:
                break
        else:
            return encode(body)
        outer = encode({**body, key: msgspec.Raw(_MARK)})
        at = outer.index(_MARK)  # a scan for one byte (memchr), and the rest joined from views: copied once
        rest = memoryview(outer)
        pieces = array.pieces
        data = b"".join((rest[:at], *pieces, rest[at + 1 :]))
        start = at + len(pieces[0]) + len(pieces[1]) + len(pieces[2])  # past "[", the lead and its comma
        view = memoryview(data)[start : len(data) - (len(outer) - at - 1) - 1]
        if 4 * (len(data) - len(view)) > len(view):  # the rest (tools, system prompt) would outweigh a quarter of the array: the array alone, copied
            prefix = _Prefix(array.messages, bytes(view), len(view))
        else:
            prefix = _Prefix(array.messages, view, len(data))
        if prefix.cost() <= self.budget:
            self._prefixes[array.messages.source()] = prefix
            self._bytes += prefix.cost()
            self._shrink()
        return data

    def _store(self, key: int, message: Message, data: bytes) -> bytes:
        """Keep `data` under `key` while `message` lives (and the budget allows)."""
        self._drop(key)
        data = bytes(memoryview(data))  # exact: msgspec's output keeps its buffer's spare room (up to half its size again)
        ref = _Ref(message, self._gone)
        ref.key = key
        self._messages[key] = (ref, data)
        self._bytes += len(data) + ENTRY_BYTES
        self._shrink()
        return data

    def _shrink(self) -> None:
        """The least recently sent go until the rest fits the budget: prefixes first (a history is
        nearly always keyed; a plain message list is a one-off such as a summary's)."""
        while self._bytes > self.budget and self._prefixes:
            self._bytes -= self._prefixes.popitem(last=False)[1].cost()
        while self._bytes > self.budget and self._messages:
            self._drop(next(iter(self._messages)))

    def _drop(self, key: int) -> None:
        entry = self._messages.pop(key, None)
        if entry is not None:
            self._bytes -= len(entry[1]) + ENTRY_BYTES

    def _gone(self, ref: _Ref) -> None:
        """A stored message was freed: its bytes go too (unless its id is stored anew already)."""
        entry = self._messages.get(ref.key)
        if entry is not None and entry[0] is ref:
            self._drop(ref.key)


def _items_json(message: Message, text: msgspec.Raw | None, items: Items) -> bytes:
    return b",".join(encode(item) for item in items(message, text))
