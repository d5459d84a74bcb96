"""Checkpoint message blobs: provider-neutral messages ⇄ the JSON chat messages Cursor stores.

Each root-prompt blob is the compact UTF-8 JSON of one chat message
(`{"role", "content": [parts], "id", "providerOptions"?}`); its blob id is the raw SHA-256 of those
exact bytes. Assistant and tool messages also carry our own neutral message verbatim under
`providerOptions.cursorByok` so a resume restores provider replay data (thinking signatures, raw
tool-argument text) byte for byte.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import msgspec

from ...run import ImagePart, Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from .entry import HistoryEntry
from .log import Projection, Window

_neutral_encoder = msgspec.json.Encoder()
_neutral_decoder = msgspec.json.Decoder(Message)


ID_SIZE = 32  # a blob id: the raw SHA-256 of its bytes


def blob_id(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _args_object(raw: str) -> Any:
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return {}


def _part_json(part: Any, model_name: str) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        return {"type": "image", "image": part.data_base64, "mimeType": part.media_type}
    if isinstance(part, ThinkingPart):
        return {"type": "reasoning", "text": part.text, "providerOptions": {"cursor": {"modelName": model_name}}}
    if isinstance(part, ToolCallPart):
        return {"type": "tool-call", "toolCallId": part.id, "toolName": part.name, "args": _args_object(part.arguments)}
    if isinstance(part, ToolResultPart):
        return {
            "type": "tool-result",
            "toolCallId": part.call_id,
            "toolName": part.name,
            "result": part.content,
            "experimental_content": [{"type": "text", "text": part.content}],
            "isError": part.is_error,
        }
    raise TypeError(f"unknown message part {type(part).__name__}")


def _compact(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _message_obj(message: Message, message_id: str, model_name: str) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "role": message.role,
        "content": [_part_json(p, model_name) for p in message.parts],
        "id": message_id,
    }
    if message.role in ("assistant", "tool"):
        obj["providerOptions"] = {"cursorByok": {"message": msgspec.to_builtins(message)}}
    return obj


def message_json(message: Message, message_id: str, model_name: str = "") -> bytes:
    return _compact(_message_obj(message, message_id, model_name))


def pending_json(message: Message, model_name: str, started_ms: int) -> str:
    """One `pending_tool_calls` entry: the assistant message whose tool calls are running, inline
    JSON (not a blob id), with when they started under `providerOptions.cursor`."""
    obj = _message_obj(message, "1", model_name)
    obj.setdefault("providerOptions", {})["cursor"] = {"pendingToolCallStartedAtMs": started_ms}
    return _compact(obj).decode()


def system_json(system_prompt: str) -> bytes:
    return _compact({"role": "system", "content": [{"type": "text", "text": system_prompt}], "id": "system"})


def message_from_json(data: bytes) -> tuple[str, Message | None]:
    """(role, neutral message); None for the system prompt (we recompile it)."""
    obj = json.loads(data)
    role = obj.get("role", "")
    if role == "system":
        return role, None
    ours = (obj.get("providerOptions") or {}).get("cursorByok", {}).get("message")
    if ours is not None:
        return role, _neutral_decoder.decode(json.dumps(ours).encode())
    parts: list[Any] = []
    for p in obj.get("content") or []:
        kind = p.get("type")
        if kind == "text":
            parts.append(TextPart(text=p.get("text", "")))
        elif kind == "image":
            parts.append(ImagePart(media_type=p.get("mimeType", "image/png"), data_base64=p.get("image", "")))
        elif kind == "reasoning":
            parts.append(ThinkingPart(text=p.get("text", "")))
        elif kind == "tool-call":
            parts.append(ToolCallPart(id=p["toolCallId"], name=p["toolName"], arguments=json.dumps(p.get("args", {}))))
        elif kind == "tool-result":
            parts.append(
                ToolResultPart(
                    call_id=p["toolCallId"],
                    name=p.get("toolName", ""),
                    content=str(p.get("result", "")),
                    is_error=bool(p.get("isError", False)),
                )
            )
    if role not in ("user", "assistant", "tool"):
        raise ValueError(f"unknown message role {role!r} in checkpoint blob")
    return role, Message(role=role, parts=parts)


class RootBlob(msgspec.Struct, frozen=True):
    """One root-prompt blob: its id, and what it is encoded from (a history entry and its position in
    the projection, or the system prompt), not its bytes."""

    id: bytes
    source: HistoryEntry | str  # str: the system prompt
    index: int = 0
    model_name: str = ""

    def data(self) -> bytes:
        if isinstance(self.source, str):
            return system_json(self.source)
        message = self.source.view()
        return message_json(message, _message_id(message, self.index), self.model_name)


def _message_id(message: Message, index: int) -> str:
    return "1" if message.role == "assistant" else f"m{index}"


ID_FIELD = b"\n "  # a root id as the state's `root_prompt_messages_json` (field 1) holds it: tag, length 32
ROOT_SIZE = len(ID_FIELD) + ID_SIZE


def root_id(roots: bytes, index: int) -> bytes:
    """The `index`-th id of encoded roots (see `RootBlobs.build`)."""
    return roots[index * ROOT_SIZE + len(ID_FIELD) : (index + 1) * ROOT_SIZE]


def root_ids(roots: bytes) -> list[bytes]:
    """The ids of encoded roots, one by one."""
    return [root_id(roots, index) for index in range(len(roots) // ROOT_SIZE)]


ROOT_ENCODING = 1
"""Bump when a root blob's bytes or id for the same message change: seeds stored before are then
not taken (their ids would name other bytes than the ones pushed under them)."""


class RootSeed(msgspec.Struct, frozen=True):
    """What the roots of a build were built from: the model, and the projected messages (`count`,
    the first one's key and the last one's) whose roots follow the system prompt's (if `system`).
    Stored with the checkpoint that names them, so that the first build after a restart takes the
    ids from there instead of encoding and hashing every message again: a projection that starts
    with those messages (see `KeyedMessages`: two keys tell it) has those roots for them."""

    model: str
    count: int
    first: str
    last: str
    system: bool
    encoding: int = ROOT_ENCODING

    def covers(self, messages: Projection, model_name: str) -> int:
        """How many of `messages`' roots are the seed's: all of its or none."""
        count = self.count
        if not count or self.encoding != ROOT_ENCODING or model_name != self.model or len(messages) < count:
            return 0
        return count if messages.key(0) == self.first and messages.key(count - 1) == self.last else 0


SEED_FIELD = 424_242
"""The field a stored checkpoint's `RootSeed` is kept under, ahead of the state's own fields: not
in the client's schema. Protobuf keeps it as an unknown field of a state read back, so it is read
only there (`roots_of` discards unknown fields) and states sent are built fresh: never sent."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def seed_field(seed: RootSeed) -> bytes:
    """`seed` as the stored state's field (wire type 2: length-delimited)."""
    data = msgspec.json.encode(seed)
    return _varint(SEED_FIELD << 3 | 2) + _varint(len(data)) + data


def seed_of(data: bytes) -> RootSeed | None:
    """The seed a `seed_field` holds (None when it is not one)."""
    try:
        return msgspec.json.decode(data, type=RootSeed)
    except msgspec.DecodeError:
        return None


class RootBlobs:
    """The root-prompt blobs of a conversation's checkpoints: the system prompt, then every
    projected message, each encoded and hashed once.

    A checkpoint follows every step, and encoding plus hashing the whole history each time costs
    ~15 ms per 300 messages (2.7 MB) of event-loop time, O(history²) over a session. Entries are
    immutable and the projection is append-only between compactions, so an entry that is the very
    same at the same position as last time keeps its blob. Only ids are kept, end to end in one bytes
    object (not an object per message), encoded as the checkpoint's field holds them, so a build
    extends them by the new messages' and the state takes them in one parse: the bytes would be a
    second copy of the history for as long as the conversation lives, and the client holds the
    blobs it was sent (one it lacks is encoded again); a message is decoded for its blob one at a
    time and not kept."""

    def __init__(self) -> None:
        self._entries: Window | None = None  # the entries of the last build
        self._ids = b""  # their blob ids, encoded as roots (`ROOT_SIZE` bytes each), in the same order
        self._model = ""
        self._system: RootBlob | None = None
        self._seed: tuple[RootSeed, bytes] | None = None  # a stored checkpoint's, for the first build (see `seed`)
        self.kept = 0  # leading messages' roots the last build kept from the one before

    def build(self, system_prompt: str | None, messages: Projection, model_name: str) -> bytes:
        """The root blob ids, the system prompt's first (when given), encoded as the state's
        `root_prompt_messages_json` (`root_ids` reads them; `blob(i)` gives the i-th blob)."""
        if system_prompt is not None:
            if self._system is None or self._system.source != system_prompt:
                self._system = RootBlob(blob_id(system_json(system_prompt)), system_prompt)
        else:
            self._system = None
        entries = messages.entries
        if self._seed is not None:  # the first build: the stored checkpoint's ids, for the messages they are of
            seed, prior = self._seed
            same, self._seed = seed.covers(messages, model_name), None
        else:
            same, prior = entries.common(self._entries) if model_name == self._model else 0, self._ids
        ids = bytearray(prior[: same * ROOT_SIZE])
        for i in range(same, len(entries)):
            message = entries.message(i)
            ids += ID_FIELD + blob_id(message_json(message, _message_id(message, i), model_name))
        self._entries, self._ids, self._model, self.kept = entries, bytes(ids), model_name, same
        return self._ids if self._system is None else ID_FIELD + self._system.id + self._ids

    def message_roots(self) -> bytes:
        """The last build's messages' roots (the system prompt's not among them), encoded."""
        return self._ids

    def system_id(self) -> bytes:
        """The last build's system prompt's root id (empty: none)."""
        return b"" if self._system is None else self._system.id

    def seed(self, seed: RootSeed, roots: bytes) -> None:
        """The roots a stored checkpoint names (encoded, the system prompt's first when `seed.system`)
        and what they were built from: the first build takes those of the messages it still starts
        with. Ignored once a build was made (it is the newer)."""
        if self._entries is None and len(roots) == (seed.count + seed.system) * ROOT_SIZE:
            self._seed = (seed, roots[seed.system * ROOT_SIZE :])

    def last_seed(self) -> RootSeed:
        """What the last build's message roots were built from (see `RootSeed`)."""
        entries = self._entries
        count = 0 if entries is None else len(entries)
        first, last = (entries.key(0), entries.key(count - 1)) if entries is not None and count else ("", "")
        return RootSeed(self._model, count, first, last, self._system is not None)

    def blob(self, index: int) -> RootBlob:
        """The `index`-th root blob of the last build (as `build` returned its id)."""
        if self._system is not None:
            if index == 0:
                return self._system
            index -= 1
        assert self._entries is not None
        return RootBlob(root_id(self._ids, index), self._entries[index], index, self._model)

    def id_of(self, message: Message) -> bytes | None:
        """The blob id built for this very message object in the last build, if any."""
        index = None if self._entries is None else self._entries.holding(message)
        return None if index is None else root_id(self._ids, index)
