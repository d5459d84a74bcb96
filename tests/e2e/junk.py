"""Junk for the server: random and mutated Connect envelopes, protobufs (valid shapes with random
values, truncated, wrong wire types), hex bodies, header sets and request targets, on every route;
plus a small keep-alive HTTP/1.1 client that sends them as they are (httpx would tidy them up)."""
from __future__ import annotations

import asyncio
import gzip
import json
import random
import uuid
from dataclasses import dataclass, field

from cursor_byok.protocol import agent_pb2 as pb, aiserver_pb2
from tests.harness.ide import BIDI_APPEND, RUN_SSE, append_body, envelope, heartbeat_message, run_request

from .edge_support import STAND_IN_MARK

ROUTES = [
    BIDI_APPEND,
    RUN_SSE,
    "/agent.v1.AgentService/GetUsableModels",
    "/aiserver.v1.AiService/AvailableModels",
    "/aiserver.v1.AiService/GetDefaultModelForCli",
    "/aiserver.v1.NetworkService/IsConnected",
    "/aiserver.v1.AnalyticsService/Batch",
    "/aiserver.v1.AiService/SomethingUpstream",
    "/__byok-api__/healthz",
    "/ui/api/conversations",
]
CONTENT_TYPES = [
    "application/proto",
    "application/connect+proto",
    "application/json",
    "application/connect+json",
    "text/plain",
    "application/x-www-form-urlencoded",
    "application/grpc",
    "",
    "application/proto; charset=utf-8",
    "APPLICATION/PROTO",
    "\x7f",
]
IDS = ["", "r", "a\x00b", "\x1b[31m", "x" * 300, "é" * 200, "\u2028", "ok-" + "9" * 40, "\ud7ff", " "]


@dataclass(frozen=True, slots=True)
class Junk:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes
    kind: str


class JunkMaker:
    """Deterministic for a seed. `model` is a configured local model: some junk is almost right.
    With `waiting=False` it leaves out the kinds the server makes wait (for a seqno 0 that never
    comes), so a connection sends as fast as the server answers."""

    def __init__(self, seed: int, host: str, model: str, *, waiting: bool = True) -> None:
        self.rng = random.Random(seed)
        self.host = host
        self.model = model
        self._kinds = [
            self.random_bytes,
            self.mutated_append,
            self.random_shape_append,
            self.truncated_append,
            self.wrong_wire_types,
            self.hex_body,
            self.odd_headers,
            self.unknown_path,
            self.runsse_junk,
            self.later_seqno_for_nobody,
            self.big_ids,
            self.envelope_junk,
        ]
        if not waiting:
            self._kinds = [k for k in self._kinds if k not in (self.runsse_junk, self.later_seqno_for_nobody)]

    def next(self) -> Junk:
        return self.rng.choice(self._kinds)()

    # -- helpers -----------------------------------------------------------------------------------
    def _id(self) -> str:
        return self.rng.choice(IDS) if self.rng.random() < 0.3 else uuid.UUID(int=self.rng.getrandbits(128)).hex

    def _headers(self, content_type: str | None = "application/proto") -> list[tuple[str, str]]:
        headers = [("host", self.host)]
        if content_type is not None:
            headers.append(("content-type", content_type))
        return headers

    def _bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)

    def _valid_append(self) -> bytes:
        rid = uuid.UUID(int=self.rng.getrandbits(128)).hex
        if self.rng.random() < 0.5:
            return append_body(rid, 0, heartbeat_message())
        msg = run_request("junk", model=self.rng.choice([self.model, "not-a-model", ""]), conversation_id=self._id())
        return append_body(rid, self.rng.choice([0, 1, 5]), msg)

    # -- kinds ---------------------------------------------------------------------------------------
    def random_bytes(self) -> Junk:
        path = self.rng.choice(ROUTES)
        return Junk("POST", path, self._headers(self.rng.choice(CONTENT_TYPES)), self._bytes(self.rng.randint(0, 600)), "random-bytes")

    def mutated_append(self) -> Junk:
        body = bytearray(self._valid_append())
        for _ in range(self.rng.randint(1, 6)):
            if body:
                body[self.rng.randrange(len(body))] = self.rng.randrange(256)
        return Junk("POST", BIDI_APPEND, self._headers(), bytes(body), "mutated-append")

    def random_shape_append(self) -> Junk:
        req = aiserver_pb2.BidiAppendRequest(append_seqno=self.rng.choice([0, 0, 1, 2**40, -1, -(2**62)]))
        req.request_id.request_id = self._id()
        msg = pb.AgentClientMessage()
        variant = self.rng.randrange(5)
        if variant == 0:
            msg.run_request.conversation_id = self._id()
            msg.run_request.run_id = self._id()
            msg.run_request.requested_model.model_id = self.rng.choice([self.model, self._id()])
            msg.run_request.action.user_message_action.user_message.message_id = self._id()
        elif variant == 1:
            msg.conversation_action.inject_context_action.injection_id = self._id()
            msg.conversation_action.inject_context_action.expected_run_id = self._id()
        elif variant == 2:
            msg.exec_client_message.id = self.rng.getrandbits(32)
            msg.exec_client_message.exec_id = self._id()
        elif variant == 3:
            msg.kv_client_message.id = self.rng.getrandbits(32)
            msg.kv_client_message.set_blob_result.SetInParent()
        else:
            msg.conversation_action.cancel_subagent_action.subagent_id = self._id()
        raw = msg.SerializeToString()
        if self.rng.random() < 0.5:
            req.data = raw.hex()
        else:
            req.data_binary = raw
        return Junk("POST", BIDI_APPEND, self._headers(), req.SerializeToString(), "random-shape")

    def truncated_append(self) -> Junk:
        body = self._valid_append()
        return Junk("POST", BIDI_APPEND, self._headers(), body[: self.rng.randrange(max(1, len(body)))], "truncated")

    def wrong_wire_types(self) -> Junk:
        # field 2 (request_id, a message) sent as varint; field 3 (seqno, varint) as bytes; etc.
        fields = [b"\x10\x01", b"\x1a\x03abc", b"\x0d\x00\x00\x00\x00", b"\x12\x05\x0a\x03\xff\xfe\xfd", b"\x0b\x0c", b"\x22\x81\x80\x80\x80\x10"]
        body = b"".join(self.rng.choice(fields) for _ in range(self.rng.randint(1, 4)))
        return Junk("POST", self.rng.choice([BIDI_APPEND, RUN_SSE]), self._headers(), body, "wrong-wire-types")

    def hex_body(self) -> Junk:
        req = aiserver_pb2.BidiAppendRequest(append_seqno=0)
        req.request_id.request_id = self._id()
        alphabet = "0123456789abcdefABCDEFxyz \n"
        req.data = "".join(self.rng.choice(alphabet) for _ in range(self.rng.randint(0, 80)))
        return Junk("POST", BIDI_APPEND, self._headers(), req.SerializeToString(), "hex")

    def odd_headers(self) -> Junk:
        headers = self._headers(self.rng.choice(CONTENT_TYPES))
        odd = [
            ("content-encoding", self.rng.choice(["gzip", "br", "zstd", "", "gzip, gzip", "\xff"])),
            ("connect-content-encoding", self.rng.choice(["gzip", "deflate"])),
            ("connect-timeout-ms", self.rng.choice(["-1", "99999999999", "abc", "1e3", ""])),
            ("x-parent-request-id", self._id()),
            ("x-parent-agent-tool-call-id", self._id()),
            ("origin", self.rng.choice(["null", "http://evil.example", "vscode-file://vscode-app"])),
            ("x-server-upstream-url", self.rng.choice(["https://[::1/x", "https://api2.cursor.sh:99999/", "http://x", "\xff\xfe", "https://api2.cursor.sh:abc/"])),
            ("x-cursor-byok-proxy", self._id()),
            ("authorization", "Bearer " + self._id()),
            ("x-request-id", "\xe9\xff\x80"),
            ("host", self.rng.choice(["evil.example", "", self.host])),
        ]
        headers += self.rng.sample(odd, self.rng.randint(1, 4))
        body = self._valid_append()
        if any(k == "content-encoding" and v == "gzip" for k, v in headers) and self.rng.random() < 0.5:
            body = gzip.compress(body)
        return Junk(self.rng.choice(["POST", "POST", "GET", "PUT", "OPTIONS"]), self.rng.choice(ROUTES), headers, body, "odd-headers")

    def unknown_path(self) -> Junk:
        paths = ["*", "/", "//x", "/%00", "/a b", "/..%2f..%2fetc/passwd", "/x?" + "a" * 300, "/agent.v1.AgentService/", "/\xe9", "/_token/x/y"]
        return Junk(self.rng.choice(["GET", "POST", "DELETE"]), self.rng.choice(paths), self._headers(), b"x", "unknown-path")

    def runsse_junk(self) -> Junk:
        body = pb.BidiRequestId(request_id=self._id()).SerializeToString()
        if self.rng.random() < 0.5:
            body = envelope(body, self.rng.choice([0, 0, 1, 2, 0x80]))
        return Junk("POST", RUN_SSE, self._headers("application/connect+proto"), body, "runsse")

    def later_seqno_for_nobody(self) -> Junk:
        rid = uuid.UUID(int=self.rng.getrandbits(128)).hex
        return Junk("POST", BIDI_APPEND, self._headers(), append_body(rid, self.rng.randint(1, 100), heartbeat_message()), "later-seqno")

    def big_ids(self) -> Junk:
        size = self.rng.choice([300, 70_000, 1 << 20])
        if self.rng.random() < 0.5:
            body = append_body("r" * size, 0, heartbeat_message())
        else:
            body = append_body(uuid.uuid4().hex, 0, run_request("hi", model=self.model, conversation_id="c" * size))
        return Junk("POST", BIDI_APPEND, self._headers(), body, "big-ids")

    def envelope_junk(self) -> Junk:
        payload = self._bytes(self.rng.randint(0, 40))
        flag = self.rng.choice([0, 1, 2, 3, 0xFF])
        length = self.rng.choice([len(payload), len(payload) + 5, 0, 2**31])
        body = bytes([flag]) + length.to_bytes(4, "big") + payload
        return Junk("POST", self.rng.choice([BIDI_APPEND, RUN_SSE]), self._headers(self.rng.choice(["application/connect+proto", "application/proto"])), body, "envelope")


@dataclass(slots=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


class RawClient:
    """One keep-alive HTTP/1.1 connection that sends requests exactly as given."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._reader = self._writer = None

    async def send(self, junk: Junk, timeout: float = 30.0) -> Answer:
        async with asyncio.timeout(timeout):
            if self._writer is None:
                self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port, limit=1 << 22)
            assert self._reader is not None
            head = f"{junk.method} {junk.path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in junk.headers)
            head += f"content-length: {len(junk.body)}\r\n\r\n"
            self._writer.write(head.encode("latin-1", "replace") + junk.body)
            try:
                answer = await self._read(self._reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                await self.close()
                raise
            if answer.headers.get("connection", "").lower() == "close":
                await self.close()
            return answer

    async def _read(self, reader: asyncio.StreamReader) -> Answer:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                key = k.strip().lower()
                headers[key] = f"{headers[key]}, {v.strip()}" if key in headers else v.strip()
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
                if size == 0:
                    break
            body = b"".join(parts)
        else:
            body = b"" if status in (204, 304) else await reader.read()
        return Answer(status, headers, body)


def connect_code(answer: Answer) -> str | None:
    """The Connect code a refusal carries: the JSON body of a unary error, or the end-stream frame
    of a streamed one (RunSSE answers 200 with the error in its only frame)."""
    body = answer.body
    if answer.status != 200 and answer.headers.get("content-type", "").startswith("application/json"):
        try:
            return json.loads(body).get("code")
        except ValueError:
            return None
    if answer.headers.get("content-type") == "text/event-stream" and len(body) >= 5 and body[0] & 2:
        try:
            err = json.loads(body[5:]).get("error")
        except ValueError:
            return None
        return err.get("code") if err else "ok"
    return None


def forwarded(answer: Answer) -> bool:
    """An answer the upstream stand-in gave (its own errors included): the passthrough's job."""
    return STAND_IN_MARK in answer.headers or "BaseHTTP" in answer.headers.get("server", "")


@dataclass
class JunkStats:
    sent: int = 0
    statuses: dict[int | str, int] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)
    unspecific: list[tuple[str, int, bytes]] = field(default_factory=list)
    server_errors: list[tuple[str, int, bytes]] = field(default_factory=list)

    def count(self, key: int | str) -> None:
        self.statuses[key] = self.statuses.get(key, 0) + 1


async def pour(port: int, host: str, model: str, *, seed: int, connections: int, stop: asyncio.Event, limit: int | None = None) -> JunkStats:
    """Junk from `connections` keep-alive connections as fast as the server answers, until `stop`
    is set (or `limit` inputs were sent). Half the connections also send the kinds that wait."""
    stats = JunkStats()

    async def sender(n: int) -> None:
        maker = JunkMaker(seed * 1000 + n, host, model, waiting=n % 2 == 0)
        client = RawClient(port)
        try:
            while not stop.is_set() and (limit is None or stats.sent < limit):
                junk = maker.next()
                stats.sent += 1
                stats.kinds[junk.kind] = stats.kinds.get(junk.kind, 0) + 1
                try:
                    answer = await client.send(junk)
                except (ConnectionError, asyncio.IncompleteReadError):
                    stats.count("closed")  # the HTTP layer closed a connection it would not parse
                    continue
                if forwarded(answer):
                    stats.count("forwarded")
                    continue
                stats.count(answer.status)
                if answer.status >= 500 and connect_code(answer) != "unimplemented":  # 501: an encoding we do not speak
                    stats.server_errors.append((junk.kind, answer.status, answer.body[:200]))
                elif answer.status >= 400 and connect_code(answer) in (None, "unknown", "internal"):
                    if answer.body or answer.status not in (400, 431):  # hyper's own bare refusals are fine
                        stats.unspecific.append((junk.kind, answer.status, answer.body[:200]))
        finally:
            await client.close()

    await asyncio.gather(*(sender(n) for n in range(connections)))
    return stats
