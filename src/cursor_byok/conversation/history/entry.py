"""One entry of a conversation's history: its kind, ids and message (or the bytes it is stored as)."""
from __future__ import annotations

import enum

import msgspec

from ...run import ImagePart, Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart


class EntryKind(str, enum.Enum):
    USER = "user"
    REQUEST_CONTEXT = "request_context"
    ASSISTANT = "assistant"
    TOOL_RESULTS = "tool_results"
    INJECTION = "injection"
    BACKGROUND_COMPLETION = "background_completion"
    COMPACTION = "compaction"


class HistoryEntry:
    """One entry of the log. An entry read from the store keeps its stored bytes and decodes its
    message only when something asks for it: a reloaded conversation's turn reads a few of its
    messages (the last ones), and projects the rest (`view`) one at a time, so its history is not
    decoded into small objects all at once."""

    __slots__ = ("seq", "event_id", "kind", "run_id", "_message", "_payload", "_text")

    def __init__(self, seq: int, event_id: str, kind: EntryKind, run_id: str, message: Message | None = None,
                 *, payload: bytes | None = None) -> None:
        if message is None and payload is None:
            raise ValueError("an entry needs its message or its stored bytes")
        self.seq = seq
        self.event_id = event_id
        self.kind = kind
        self.run_id = run_id
        self._message = message
        self._payload = payload
        self._text: memoryview | None = None  # its lone user text as JSON, in the bytes encoded for the store

    def __repr__(self) -> str:
        return f"HistoryEntry({self.seq}, {self.event_id!r}, {self.kind.value}, {self.run_id!r})"

    @property
    def message(self) -> Message:
        """The message, decoded once and kept (for the entries a turn works with)."""
        if self._message is None:
            self._message = self.view()
        return self._message

    def view(self) -> Message:
        """The message, decoded afresh and not kept if it is not decoded already."""
        if self._message is not None:
            return self._message
        assert self._payload is not None
        return decode_entry(self._payload).message

    def holds(self, message: Message) -> bool:
        """Whether this very message object is the entry's (decoded) message."""
        return self._message is message

    def stored_bytes(self) -> bytes:
        """What the store keeps of it (`encode_entry`), encoded once. An appended entry keeps them
        only until the prefix chain reads its canonical part from them (`canonical`, once), and its
        lone user text's part of them until the provider request takes it (`text_json`, once)."""
        if self._payload is None:
            message = self.message
            self._payload = payload = encode_entry(self.kind, message)
            self._text = _lone_text(self.kind, message, payload)
        return self._payload

    def text_json(self) -> msgspec.Raw | None:
        """Its lone user text as the JSON string encoded for the store, which is byte for byte what
        msgspec writes for that str anywhere: the first provider request splices it rather than
        escaping the text again (once; a request built again, rarely, encodes it). None for bytes
        read from the store (another version may have escaped otherwise) and for other messages."""
        text, self._text = self._text, None
        return None if text is None else msgspec.Raw(text)

    def canonical(self) -> bytes | memoryview:
        """The message's canonical bytes: the part of its stored bytes that holds them, when it has
        them (see `stored_canonical`), without decoding or encoding it."""
        payload = self._payload
        if payload is None:
            return canonical(self.view())
        if self._message is not None:  # the chain reads an entry once: its message is what it keeps
            self._payload = None
        return stored_canonical(self.kind, payload)

    def stored_size(self) -> int:
        """What the entry holds: its message's text, or for an entry not decoded its stored bytes."""
        return len(self._payload) if self._message is None and self._payload is not None else text_bytes(self.message)


class StoredEntry(msgspec.Struct, frozen=True):
    """What goes into the store's payload column for one entry."""

    kind: EntryKind
    message: Message


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(StoredEntry)


def encode_entry(kind: EntryKind, message: Message) -> bytes:
    return _encoder.encode(StoredEntry(kind, message))


def decode_entry(payload: bytes) -> StoredEntry:
    return _decoder.decode(payload)


def canonical(message: Message) -> bytes:
    """The canonical bytes of a projected message (what the prefix chain hashes)."""
    return _encoder.encode(message)


_HEADS = {kind: b'{"kind":"' + kind.value.encode() + b'","message":' for kind in EntryKind}


def stored_canonical(kind: EntryKind, payload: bytes) -> bytes | memoryview:
    """A stored entry's canonical message bytes: its stored encoding embeds them as they are, after
    `StoredEntry`'s kind (msgspec writes the fields in order); a view of them, not a copy (the
    chain hashes any buffer)."""
    head = _HEADS[kind]
    if payload.startswith(head) and payload.endswith(b"}"):
        return memoryview(payload)[len(head) : -1]
    return canonical(decode_entry(payload).message)


# A user message with one text part, as `encode_entry` writes it: a head per kind, the text, a tail.
_TEXT_HEADS = {kind: head + b'{"role":"user","parts":[{"type":"text","text":' for kind, head in _HEADS.items()}
_TEXT_AT = {kind: len(head) for kind, head in _TEXT_HEADS.items()}
_TEXT_TAIL = b"}]}}"
_TEXT_END = -len(_TEXT_TAIL)


def _lone_text(kind: EntryKind, message: Message, payload: bytes) -> memoryview | None:
    """The JSON string of a user message's only part, a text, in its stored encoding (a view: no copy)."""
    parts = message.parts
    if message.role == "user" and len(parts) == 1 and type(parts[0]) is TextPart:
        at = _TEXT_AT[kind]
        if payload[:at] == _TEXT_HEADS[kind] and payload[_TEXT_END:] == _TEXT_TAIL:  # slices, not calls: on every start
            return memoryview(payload)[at:_TEXT_END]
    return None


def text_bytes(message: Message) -> int:
    """The length of the text a message holds, images included (as their base64)."""
    size = 0
    for part in message.parts:
        if isinstance(part, (TextPart, ThinkingPart)):
            size += len(part.text)
        elif isinstance(part, ToolCallPart):
            size += len(part.arguments)
        elif isinstance(part, ToolResultPart):
            size += len(part.content) + sum(len(image.data_base64) for image in part.images)
        elif isinstance(part, ImagePart):
            size += len(part.data_base64)
    return size
