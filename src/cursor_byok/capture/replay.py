"""`cursor-byok replay`: play the client side of captured streams against a server and diff what
it answers against what the recording holds.

The client's own messages (run requests, actions, heartbeats) go out in recorded order at their
recorded offsets, their conversation, run and message ids made fresh (one mapping for the whole
replay, so a second turn continues the first one's conversation). What the client only sent in
answer to the server (exec results, KV acks, interaction responses) goes out when the live server
asks the same thing, re-addressed to the live request's id. The diff compares, per stream, the
server's message kinds in order with the fields each had (values, ids and timestamps ignored, and
what timing moves: see `_compared`), how it ended and the appends' answers; timing is shown, and
counted only with a slack factor.
"""
from __future__ import annotations

import abc

import asyncio
import base64
import difflib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from ..hotpath import encode_frame
from ..protocol import BIDI_APPEND_PATH, RUN_PATH, RUN_SSE_PATH, ConnectError, StreamDecoder, agent_pb2, aiserver_pb2, which
from ..local_trust import AUTH_TOKEN_HEADER
from .writer import FORMAT
from .redact import Redactor, kind_of, names_an_id

__all__ = ["ReplayReport", "StreamReport", "replay_files"]

# Client messages that only answer the server: sent when the live server asks the same thing.
_ANSWERS = {
    "exec_client_message": "exec",
    "exec_client_control_message": "exec",
    "kv_client_message": "kv",
    "interaction_response": "interaction",
}
_ASKS = {"exec_server_message": "exec", "kv_server_message": "kv", "interaction_query": "interaction"}
# Ids the client makes up: fresh in a replay (the recorded ones are taken on the server it ran on).
_FRESH_IDS = frozenset({"conversation_id", "run_id", "message_id", "expected_run_id", "agent_session_id", "injection_id", "conversation_group_id"})
_HEARTBEAT = "interaction_update.heartbeat"  # timing: the server sends them while it waits
_BLOB_PUSH = "kv_server_message.set_blob_args"
_CHECKPOINT = "conversation_checkpoint_update"
_TURN_ENDED = "interaction_update.turn_ended"
_STREAM_WAIT_SECONDS = 60.0  # beyond the recorded duration, before a stream that does not end is cut


@dataclass
class StreamReport:
    name: str
    recorded: list[str] = field(default_factory=list)
    live: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the replay could not do as recorded
    timing: str = ""
    slow: bool = False
    skipped: str = ""

    @property
    def diverged(self) -> bool:
        return not self.skipped and (self.recorded != self.live or self.slow)

    def lines(self) -> Iterator[str]:
        if self.skipped:
            yield f"{self.name}: skipped ({self.skipped})"
            return
        yield f"{self.name}: {'DIVERGED' if self.diverged else 'same'}" + (f"; {self.timing}" if self.timing else "")
        for note in self.notes:
            yield f"  note: {note}"
        if self.recorded != self.live:
            yield from ("  " + line for line in difflib.unified_diff(self.recorded, self.live, "recorded", "replayed", lineterm="", n=2))


@dataclass
class ReplayReport:
    streams: list[StreamReport] = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        return any(s.diverged for s in self.streams)

    @property
    def replayed(self) -> int:
        return sum(not s.skipped for s in self.streams)

    def lines(self) -> Iterator[str]:
        for stream in self.streams:
            yield from stream.lines()
        if not self.replayed:
            yield f"nothing replayed ({len(self.streams)} skipped)"
        elif self.diverged:
            yield f"divergence in {sum(s.diverged for s in self.streams)} of {self.replayed} stream(s)"
        else:
            yield f"no divergence ({self.replayed} stream(s) replayed, {len(self.streams) - self.replayed} skipped)"


class _Ids:
    """Recorded client-made ids → fresh ones, the same for the whole replay."""

    def __init__(self) -> None:
        self._fresh: dict[str, str] = {}
        # the live server's last checkpoint of each (fresh) conversation id: a later turn sends it
        self.checkpoints: dict[str, agent_pb2.ConversationStateStructure] = {}

    def __call__(self, recorded: str) -> str:
        if not recorded:
            return recorded
        return self._fresh.setdefault(recorded, uuid.uuid4().hex)

    def renew(self, message: Message) -> None:
        for descriptor, value in message.ListFields():
            if descriptor.message_type is not None:
                if descriptor.message_type.GetOptions().map_entry:
                    continue
                for item in value if descriptor.is_repeated else (value,):
                    self.renew(item)
            elif descriptor.name in _FRESH_IDS and isinstance(value, str):
                setattr(message, descriptor.name, self(value))


async def replay_files(files: list[Path], url: str, *, token: str = "", timing_slack: float | None = None) -> ReplayReport:
    loaded = ((json.loads(p.read_text()), p) for p in files)
    # a folder may hold other files beside the captures (a fixture's provider.json)
    docs = sorted(((d, p) for d, p in loaded if isinstance(d, dict) and d.get("format") == FORMAT), key=lambda d: (d[0]["started_at"], d[1].name))
    headers = {AUTH_TOKEN_HEADER: token} if token else {}
    report = ReplayReport()
    ids = _Ids()
    async with httpx.AsyncClient(base_url=url.rstrip("/"), timeout=httpx.Timeout(30.0, read=None), headers=headers) as client:
        for doc, path in docs:
            stream = StreamReport(path.name)
            report.streams.append(stream)
            if doc["kind"] == "agent-sse":
                await _SseSession(client, doc, ids, stream).run(timing_slack)
            elif doc["kind"] == "agent-run":
                await _RunSession(httpx.URL(url), headers, doc, ids, stream).run(timing_slack)
            else:
                await _unary(client, doc, stream)
    return report


async def _unary(client: httpx.AsyncClient, doc: dict[str, Any], stream: StreamReport) -> None:
    exchange = doc["exchanges"][0]
    request = exchange["frames"][0]
    if "raw" not in request:
        stream.skipped = "a side RPC whose body a redacted capture does not keep"
        return
    headers = {k: v for k, v in exchange["request_headers"] if k in ("content-type", "connect-protocol-version")}
    answer = await client.post(exchange["path"], content=base64.b64decode(request["raw"]), headers=headers)
    stream.recorded = [f"{exchange['path']} -> {exchange['status']}"]
    stream.live = [f"{exchange['path']} -> {answer.status_code}"]


def _field_paths(value: Any, at: str = "") -> set[str]:
    """The dotted names of the fields set in a message's JSON form (values ignored)."""
    paths: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{at}.{key}" if at else key
            paths.add(here)
            paths |= _field_paths(item, here)
    elif isinstance(value, list):
        for item in value:
            paths |= _field_paths(item, at + "[]")
    return paths


def _line(kind: str, message_json: dict[str, Any]) -> str:
    return f"{kind} {{{', '.join(sorted(_field_paths(message_json)))}}}"


def _end_line(error: dict[str, Any] | None) -> str:
    return "end: " + ((error or {}).get("code") or "ok")


def _compared(entries: list[tuple[str, str]]) -> list[str]:
    """What of a stream's server messages ((kind, line) each, `end: …` last) the diff compares:
    what the protocol orders, not what timing moves. Out: heartbeats; checkpoints taken during a
    run (asynchronous by design: one overtaken by a newer one is never sent), while those after
    `turn_ended` stay in order; blob pushes by their presence (a step checkpoint's blobs go out
    whenever its task runs). Consecutive equal lines once: how a text was cut into deltas is the
    provider's and the loop's timing."""
    out: list[str] = []
    pushed = False
    turn_ending = False  # since turn_ended, nothing but the final checkpoints yet
    for kind, line in entries:
        if kind == _HEARTBEAT:
            continue
        if kind == _BLOB_PUSH:
            pushed = True
            continue
        if kind == _CHECKPOINT and not turn_ending:
            continue
        turn_ending = kind == _TURN_ENDED or (turn_ending and kind == _CHECKPOINT)
        if not out or out[-1] != line:
            out.append(line)
    if pushed:
        out.append(f"{_BLOB_PUSH} (pushed: how many and where not compared)")
    return out


def _signature(message: dict[str, Any]) -> str:
    """What a server's request asks, ids and trace context aside."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if not names_an_id(k) and k != "span_context"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return json.dumps(strip(message), sort_keys=True)


@dataclass
class _Ask:
    """A request the recorded server made, and what the client answered it with."""

    kind: str
    signature: str
    answers: list[agent_pb2.AgentClientMessage] = field(default_factory=list)
    used: bool = False


@dataclass
class _Sent:
    """A message the recorded client sent: when, what, and what its append was answered."""

    at: float  # seconds from the stream's start
    kind: str
    raw: bytes | None  # None: the capture could not decode it
    answer: str = ""  # "append <kind> -> <status>", for an append


def _raw(frame: dict[str, Any]) -> bytes | None:
    """A client frame's message bytes, None when the capture could not decode it."""
    return base64.b64decode(frame["raw"]) if "raw" in frame and "kind" in frame else None


class _Session(abc.ABC):
    """One captured agent stream, replayed: the wire (RunSSE + BidiAppend, or one HTTP/2 `Run`)
    is the subclass's."""

    def __init__(self, doc: dict[str, Any], ids: _Ids, report: StreamReport) -> None:
        self.ids = ids
        self.report = report
        self.redactor = Redactor((), with_content=not doc["redacted"])  # the live side seen as the capture saw it
        self.request_id = ids(doc["key"])
        self.blobs: dict[bytes, bytes] = {}  # what the live server stored with this client
        self.append_answers: list[tuple[int, str]] = []
        self.conversation = ""  # the live conversation id of this stream's run request
        self.duration = max(e["at_ms"] + e["duration_ms"] for e in doc["exchanges"]) / 1000
        sent, self.server_frames = self.recorded(doc)
        self.asks: dict[str, list[_Ask]] = {}
        by_id: dict[tuple[str, int], _Ask] = {}
        for frame in self.server_frames:
            top = frame.get("kind", "").partition(".")[0]
            if top in _ASKS:
                message = frame["message"][top]
                ask = _Ask(frame["kind"], _signature(message))
                self.asks.setdefault(frame["kind"], []).append(ask)
                by_id.setdefault((_ASKS[top], int(message.get("id", 0))), ask)
        self.spontaneous: list[tuple[float, agent_pb2.AgentClientMessage]] = []
        # each kind of append and its answer once: how many blob acks there were follows the pushes
        self.recorded_answers = sorted({item.answer for item in sent if item.answer})
        for item in sent:
            if item.raw is None:
                report.notes.append(f"a client message at {item.at * 1000:.0f} ms was not decodable; not sent")
                continue
            message = agent_pb2.AgentClientMessage.FromString(item.raw)
            top = which(message, "message") or ""
            family = _ANSWERS.get(top)
            if family is None:
                self.spontaneous.append((item.at, message))
                continue
            ask = by_id.get((family, _answered_id(message, top)))
            if ask is None:
                report.notes.append(f"{item.kind} answers nothing the recorded server asked; not sent")
            else:
                ask.answers.append(message)

    @abc.abstractmethod
    def recorded(self, doc: dict[str, Any]) -> tuple[list[_Sent], list[dict[str, Any]]]:
        """What the client sent, and the server's frames, as recorded."""

    @abc.abstractmethod
    async def send(self, message: agent_pb2.AgentClientMessage) -> None:
        """Send one client message to the live server."""

    @abc.abstractmethod
    def chunks(self) -> AsyncIterator[bytes]:
        """The live server's stream, as it arrives (opened by the first `send` for `Run`)."""

    async def close(self) -> None:
        pass

    async def run(self, timing_slack: float | None) -> None:
        report = self.report
        live_lines: list[tuple[str, str]] = []  # (kind, line) of each server message, as `_compared` takes them
        loop = asyncio.get_running_loop()
        started = loop.time()
        first_answer: list[float] = []
        reader = loop.create_task(self._read(live_lines, first_answer, started)) if self.server_frames else None
        try:
            for offset, message in self.spontaneous:
                delay = started + offset - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)  # the recorded client's timing, not a synchronisation
                self.ids.renew(message)
                self._continue_conversation(message)
                try:
                    await self.send(message)
                except Exception as exc:  # noqa: BLE001 - the server went away: a divergence, not a crash
                    live_lines.append(("client", f"client: {kind_of(message)} could not be sent ({type(exc).__name__})"))
                    break
            if reader is not None:
                limit = self.duration + _STREAM_WAIT_SECONDS
                try:
                    await asyncio.wait_for(asyncio.shield(reader), limit)
                except asyncio.TimeoutError:
                    report.notes.append(f"the stream did not end within {limit:.0f}s")
                    live_lines.append(("end", "end: (none)"))
        finally:
            if reader is not None and not reader.done():
                reader.cancel()
            await self.close()
        took = loop.time() - started
        report.recorded = [*self._recorded_lines(), *self.recorded_answers]
        report.live = [*_compared(live_lines), *sorted({a for _, a in self.append_answers})]
        first = f"first answer {first_answer[0] * 1000:.0f} ms, " if first_answer else ""
        report.timing = f"{first}stream {took * 1000:.0f} ms (recorded {self.duration * 1000:.0f} ms)"
        report.slow = timing_slack is not None and took > self.duration * timing_slack + 1.0

    def _recorded_lines(self) -> list[str]:
        entries = []
        for frame in self.server_frames:
            if "end_stream" in frame:
                entries.append(("end", _end_line(frame["end_stream"])))
            elif "kind" in frame:
                entries.append((frame["kind"], _line(frame["kind"], frame["message"])))
        return _compared(entries)

    def _continue_conversation(self, message: agent_pb2.AgentClientMessage) -> None:
        """A later turn's run request carries the state the recorded server last sent: send the
        live server's instead."""
        if which(message, "message") != "run_request":
            return
        self.conversation = message.run_request.conversation_id
        live = self.ids.checkpoints.get(self.conversation)
        if live is not None and message.run_request.HasField("conversation_state"):
            message.run_request.conversation_state.CopyFrom(live)

    async def _read(self, lines: list[tuple[str, str]], first_answer: list[float], started: float) -> None:
        decoder = StreamDecoder(agent_pb2.AgentServerMessage, gzip=True)
        loop = asyncio.get_running_loop()
        try:
            async for chunk in self.chunks():
                for message in decoder.feed(chunk):
                    if not first_answer:
                        first_answer.append(loop.time() - started)
                    kind = kind_of(message)
                    lines.append((kind, _line(kind, MessageToDict(message, preserving_proto_field_name=True))))
                    await self._react(kind, message)
                if decoder.ended:
                    lines.append(("end", _end_line(decoder.error.to_json_obj() if decoder.error else None)))
                    return
        except ConnectError as err:
            lines.append(("end", f"end: undecodable ({err.code})"))
            return
        except _Refused as refused:
            lines.append(("end", f"end: HTTP {refused.status}"))
            return
        except Exception as exc:  # noqa: BLE001 - a connection that failed is this stream's answer
            lines.append(("end", f"end: connection failed ({type(exc).__name__})"))
            return
        lines.append(("end", "end: (closed without an end-of-stream frame)"))

    async def _react(self, kind: str, message: agent_pb2.AgentServerMessage) -> None:
        top = kind.partition(".")[0]
        if top == "conversation_checkpoint_update" and self.conversation:
            self.ids.checkpoints[self.conversation] = message.conversation_checkpoint_update
            return
        if top not in _ASKS:
            return
        asked = getattr(message, top)
        if kind == "kv_server_message.set_blob_args":
            self.blobs[asked.set_blob_args.blob_id] = asked.set_blob_args.blob_data
        redacted = agent_pb2.AgentServerMessage.FromString(base64.b64decode(self.redactor.frame(message.SerializeToString(), agent_pb2.AgentServerMessage)["raw"]))
        signature = _signature(MessageToDict(getattr(redacted, top), preserving_proto_field_name=True))
        candidates = [a for a in self.asks.get(kind, ()) if not a.used]
        ask = next((a for a in candidates if a.signature == signature), None)
        if ask is None and candidates:
            ask = candidates[0]
            if kind != "kv_server_message.set_blob_args":  # what a blob holds names this run's ids: only its ack matters
                self.report.notes.append(f"the server asked {kind} with other arguments than recorded ({_first_difference(ask.signature, signature)}); answered as recorded")
        if ask is None:
            return  # the diff shows the extra request
        ask.used = True
        for answer in ask.answers:
            reply = agent_pb2.AgentClientMessage()
            reply.CopyFrom(answer)
            _readdress(reply, asked, self.blobs)
            await self.send(reply)


class _Refused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _SseSession(_Session):
    """RunSSE for the server's side, one BidiAppend per client message."""

    def __init__(self, client: httpx.AsyncClient, doc: dict[str, Any], ids: _Ids, report: StreamReport) -> None:
        self.client = client
        self.seqno = 0
        self.lock = asyncio.Lock()
        super().__init__(doc, ids, report)

    def recorded(self, doc: dict[str, Any]) -> tuple[list[_Sent], list[dict[str, Any]]]:
        stream = next((e for e in doc["exchanges"] if e["path"] == RUN_SSE_PATH), None)
        sent = []
        for exchange in doc["exchanges"]:
            if exchange["path"] != BIDI_APPEND_PATH:
                continue
            frame, answer = exchange["frames"][0], exchange["frames"][-1]
            kind = frame.get("kind", "?")
            sent.append(_Sent(exchange["at_ms"] / 1000, kind, _raw(frame), f"append {kind} -> {answer.get('status')}"))
        return sent, stream["frames"][1:] if stream is not None else []

    async def send(self, message: agent_pb2.AgentClientMessage) -> None:
        async with self.lock:  # seqnos in the order the appends go out
            seqno = self.seqno
            self.seqno += 1
            request = aiserver_pb2.BidiAppendRequest(data=message.SerializeToString().hex(), append_seqno=seqno)
            request.request_id.request_id = self.request_id
            answer = await self.client.post(BIDI_APPEND_PATH, content=request.SerializeToString(), headers={"content-type": "application/proto"})
        self.append_answers.append((seqno, f"append {kind_of(message)} -> {answer.status_code}"))

    async def chunks(self) -> AsyncIterator[bytes]:
        body = encode_frame(agent_pb2.BidiRequestId(request_id=self.request_id).SerializeToString())
        async with self.client.stream("POST", RUN_SSE_PATH, content=body, headers={"content-type": "application/connect+proto"}) as answer:
            if answer.status_code != 200:
                raise _Refused(answer.status_code)
            async for chunk in answer.aiter_raw():
                yield chunk


class _RunSession(_Session):
    """One HTTP/2 `Run` stream carrying both sides (h2c, or TLS with ALPN h2 for https)."""

    def __init__(self, url: httpx.URL, headers: dict[str, str], doc: dict[str, Any], ids: _Ids, report: StreamReport) -> None:
        self.url = url
        self.headers = headers
        self.h2: Any = None
        self.stream: Any = None
        self.opened = asyncio.Event()
        super().__init__(doc, ids, report)

    def recorded(self, doc: dict[str, Any]) -> tuple[list[_Sent], list[dict[str, Any]]]:
        frames = doc["exchanges"][0]["frames"]
        sent = [_Sent(f["at_ms"] / 1000, f.get("kind", "?"), _raw(f)) for f in frames if f["dir"] == "client"]
        return sent, [f for f in frames if f["dir"] == "server"]

    async def send(self, message: agent_pb2.AgentClientMessage) -> None:
        if self.stream is None:
            from ..h2_client import H2Client

            tls = None
            if self.url.scheme == "https":
                import ssl

                tls = ssl.create_default_context()
            self.h2 = await H2Client.connect(self.url.host, self.url.port or (443 if tls else 80), tls=tls, server_hostname=self.url.host)
            head = [(":method", "POST"), (":scheme", self.url.scheme), (":authority", self.url.netloc.decode()), (":path", RUN_PATH)]
            head += [("content-type", "application/connect+proto"), ("connect-protocol-version", "1"), *self.headers.items()]
            self.stream = await self.h2.request(head)
            self.opened.set()
        await self.stream.send(encode_frame(message.SerializeToString()))

    async def chunks(self) -> AsyncIterator[bytes]:
        await self.opened.wait()
        status, _ = await self.stream.response()
        if status != 200:
            raise _Refused(status)
        while (data := await self.stream.read()) is not None:
            yield data

    async def close(self) -> None:
        if self.h2 is not None:
            await self.h2.close()


def _first_difference(recorded: str, live: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(recorded, live)) if a != b), min(len(recorded), len(live)))
    return f"recorded …{recorded[max(0, at - 40):at + 40]}… live …{live[max(0, at - 40):at + 40]}…"


def _answered_id(message: agent_pb2.AgentClientMessage, top: str) -> int:
    inner = getattr(message, top)
    if top == "exec_client_control_message":
        member = which(inner, "message")
        return int(getattr(inner, member).id) if member else 0
    return int(inner.id)


def _readdress(reply: agent_pb2.AgentClientMessage, asked: Message, blobs: dict[bytes, bytes]) -> None:
    """A recorded answer addressed to the live request (its id, its exec id), a blob read given
    what the live server stored."""
    top = which(reply, "message")
    inner = getattr(reply, top)
    if top == "exec_client_control_message":
        member = which(inner, "message")
        if member:
            getattr(inner, member).id = asked.id
        return
    inner.id = asked.id
    if top == "exec_client_message":
        inner.exec_id = asked.exec_id
    elif top == "kv_client_message" and which(inner, "message") == "get_blob_result":
        stored = blobs.get(asked.get_blob_args.blob_id)
        if stored is not None:
            inner.get_blob_result.blob_data = stored
