"""Redaction: a capture can be attached to a public bug report. Canary secrets and content put in
every field a client or the server can fill survive nowhere in the file: not in the decoded JSON,
not in the raw bytes kept beside it, not in the headers."""
from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from cursor_byok.capture import Redactor
from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.capture import capturing
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

MARK = "CANARY"
CONFIGURED_KEY = "cfgkey-CANARY-0f1e2d3c4b5a"  # no known key shape: only the config names it


def canary(n: int, field: FieldDescriptor) -> str:
    """A secret-shaped canary for a field a capture keeps (ids, names: only the shape betrays it),
    a content canary elsewhere."""
    return f"sk-{MARK}{n:06d}abcdefghijklmnop" if Redactor.keeps(field) else f"{MARK} content {n}"


class Filler:
    """Every string, bytes and map-key field of a message filled with a distinct canary, `depth`
    levels down; each oneof set to its member `seed % len(members)`, so a few seeds reach them all."""

    def __init__(self, seed: int, depth: int = 3) -> None:
        self.seed = seed
        self.depth = depth
        self.count = 0
        self.filled: set[str] = set()  # full names of the fields given a canary

    def fill(self, message: Message, depth: int | None = None) -> Message:
        depth = self.depth if depth is None else depth
        descriptor: Descriptor = message.DESCRIPTOR
        chosen = {o.name: o.fields[self.seed % len(o.fields)].name for o in descriptor.oneofs if o.fields}
        for field in descriptor.fields:
            oneof = field.containing_oneof
            if oneof is not None and chosen.get(oneof.name) != field.name:
                continue
            self._set(message, field, depth)
        return message

    def _value(self, field: FieldDescriptor) -> str | bytes:
        self.count += 1
        self.filled.add(field.full_name)
        text = canary(self.count, field)
        return text.encode() if field.type == FieldDescriptor.TYPE_BYTES else text

    def _set(self, message: Message, field: FieldDescriptor, depth: int) -> None:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key_field, value_field = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            if key_field.type != FieldDescriptor.TYPE_STRING:
                return
            target = getattr(message, field.name)
            key = self._value(key_field)
            if value_field.message_type is not None:
                if depth > 1:
                    self.fill(target[key], depth - 1)
            elif value_field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
                target[key] = self._value(value_field)
            return
        if field.message_type is not None:
            if depth <= 1:
                return
            if field.is_repeated:
                self.fill(getattr(message, field.name).add(), depth - 1)
            else:
                getattr(message, field.name).SetInParent()
                self.fill(getattr(message, field.name), depth - 1)
            return
        if field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
            if field.is_repeated:
                getattr(message, field.name).append(self._value(field))
            else:
                setattr(message, field.name, self._value(field))


def reachable(root: Descriptor) -> list[Descriptor]:
    """Every message type a message of type `root` can hold, itself included (map entries aside)."""
    seen: dict[str, Descriptor] = {}
    stack = [root]
    while stack:
        descriptor = stack.pop()
        if descriptor.full_name in seen:
            continue
        seen[descriptor.full_name] = descriptor
        stack.extend(f.message_type for f in descriptor.fields if f.message_type is not None)
    return [d for d in seen.values() if not d.GetOptions().map_entry]


def text_fields(types: list[Descriptor]) -> set[str]:
    return {f.full_name for d in types for f in d.fields if f.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)}


def samples(descriptor: Descriptor, filled: set[str]) -> Iterator[Message]:
    """Messages of one type, each of its oneof members chosen by one of them, every text field
    below filled (`filled` collects which)."""
    message_type = GetMessageClass(descriptor)
    for seed in range(max([len(o.fields) for o in descriptor.oneofs] or [1])):
        filler = Filler(seed)
        yield filler.fill(message_type())
        filled |= filler.filled


def survivors(text: str, mark: str = MARK) -> list[str]:
    """Where a canary (`mark`) survives in a capture document: its text, and every base64 string
    in it decoded (the raw bytes)."""
    found = [text[max(0, i - 40): i + 40] for i in _find_all(text, mark)]
    for value in _strings(json.loads(text)):
        try:
            decoded = base64.b64decode(value, validate=True)
        except ValueError:
            continue
        if mark.encode() in decoded:
            found.append(f"raw bytes {value[:60]}")
    return found


def _find_all(text: str, needle: str) -> Iterator[int]:
    at = text.find(needle)
    while at >= 0:
        yield at
        at = text.find(needle, at + 1)


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_no_canary_survives_in_any_field_of_either_direction() -> None:
    """Every message type either side can send, each of its text fields (strings, bytes, map keys)
    holding a canary: ids and names a key-shaped one, the rest content."""
    redactor = Redactor(secrets=[CONFIGURED_KEY], with_content=False)
    types = {d.full_name: d for root in (pb.AgentClientMessage, pb.AgentServerMessage) for d in reachable(root.DESCRIPTOR)}
    filled: set[str] = set()
    for descriptor in types.values():
        for sample in samples(descriptor, filled):
            raw = sample.SerializeToString()
            frame = redactor.frame(raw, type(sample))
            text = json.dumps(frame)
            assert not survivors(text), (descriptor.full_name, survivors(text)[:5])
            # what the capture keeps decodes again, to the redacted message (replay sends it)
            assert type(sample).FromString(base64.b64decode(frame["raw"])) is not None
    assert filled >= text_fields(list(types.values()))  # every text field got its canary


def test_with_content_keeps_content_but_never_a_secret() -> None:
    redactor = Redactor(secrets=[CONFIGURED_KEY], with_content=True)
    msg = pb.AgentClientMessage()
    uma = msg.run_request.action.user_message_action
    uma.user_message.text = f"my key is {CONFIGURED_KEY} and sk-ant-api03-{MARK}abcdefghijklmnopqrstuv, and the file says hello"
    frame = redactor.frame(msg.SerializeToString(), pb.AgentClientMessage)
    text = json.dumps(frame)
    assert "the file says hello" in text
    assert not survivors(text), survivors(text)


def test_headers_keep_what_describes_the_client_and_drop_credentials() -> None:
    redactor = Redactor(secrets=[CONFIGURED_KEY], with_content=False)
    headers = [
        (b"authorization", b"Bearer eyJ" + MARK.encode() + b".abc.def"),
        (b"x-cursor-checksum", MARK.encode() + b"checksum"),
        (b"cookie", b"session=" + MARK.encode()),
        (b"x-cursor-byok-token", MARK.encode() + b"tok"),
        (b"x-anything", b"sk-" + MARK.encode() + b"0123456789abcdef"),
        (b"x-cursor-config", CONFIGURED_KEY.encode()),
        (b"x-cursor-client-version", b"1.7.0"),
        (b"content-type", b"application/proto"),
    ]
    kept = dict(redactor.headers(headers))
    assert MARK not in json.dumps(kept), kept
    assert kept["x-cursor-client-version"] == "1.7.0" and kept["content-type"] == "application/proto"
    assert set(kept) == {h.decode() for h, _ in headers}  # which headers came is kept, their secrets not


async def test_a_redacted_capture_of_a_real_session_keeps_no_canary(tmp_path: Path, provider: FakeProviderServer) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "secret.txt").write_text(f"{MARK} file contents\n")
    cfg = ServerConfig(
        data_dir=tmp_path / "server",
        models=[ModelSpec(id="byok-canary", provider="openai-chat", base_url=provider.url + "/v1")],
        extra_server={"blob_ack_timeout_seconds": 3.0},
    )
    with ServerProcess(cfg, env={"CURSOR_BYOK_TEST_KEY": f"sk-{MARK}-configured-key"}) as server:
        provider.enqueue(
            OPENAI_CHAT.tool_calls([CallSpec("c_r", "Read", [json.dumps({"path": str(workspace / "secret.txt")})])]),
            OPENAI_CHAT.tool_calls([CallSpec("c_s", "Shell", [json.dumps({"command": f"echo {MARK}-shell-output"})])]),
            OPENAI_CHAT.text([f"the model says {MARK}"]),
        )
        async with capturing(server) as captured:
            ide = ScriptedIDE(server.base_url, workspace)
            try:
                msg = run_request(f"user text {MARK}, my key sk-{MARK}-configured-key", model="byok-canary", conversation_id=uuid.uuid4().hex, workspace=str(workspace))
                msg.run_request.action.user_message_action.request_context.env.os_version = f"{MARK}-os"
                log = await ide.turn(msg)
                assert log.terminal is None and MARK in log.text
                credentials = {"authorization": f"Bearer {MARK}tok", "x-cursor-checksum": f"{MARK}sum", "cookie": f"a={MARK}"}
                await ide.append(uuid.uuid4().hex, run_request("hi", model="byok-canary", conversation_id=None), headers=credentials)
            finally:
                await ide.close()
        assert captured.files
        for path in captured.files:
            text = path.read_text()
            assert not survivors(text), (path.name, survivors(text)[:5])


def test_unknown_fields_are_listed_and_kept_as_bytes_only_with_content() -> None:
    """A newer Cursor's field our protos lack: its number and size always, its bytes only with
    content (and then in the raw message too), since nobody can tell what it holds."""
    msg = pb.AgentClientMessage()
    msg.run_request.action.user_message_action.user_message.text = "hi"
    newer = bytes([0xBA, 0x3E]) + bytes([len("newer CANARY value")]) + b"newer CANARY value"  # field 999, length-delimited
    inner = msg.run_request.SerializeToString() + newer
    raw = bytes([0x0A, len(inner)]) + inner  # AgentClientMessage.run_request = 1
    redacted = Redactor((), with_content=False).frame(raw, pb.AgentClientMessage)
    assert redacted["unknown"] == [{"at": "run_request", "field": 999, "wire_type": 2, "bytes": len("newer CANARY value")}]
    assert not survivors(json.dumps(redacted))
    kept = Redactor((), with_content=True).frame(raw, pb.AgentClientMessage)
    assert base64.b64decode(kept["unknown"][0]["raw"]) == b"newer CANARY value"
    assert base64.b64decode(kept["raw"]) == raw
