"""A scripted IDE: speaks Cursor's wire format over real HTTP, as RunSSE + hex BidiAppends
(`transport="sse"`, HTTP/1.1) or as one HTTP/2 `Run` stream per request id (`transport="run"`).

It executes exec messages against a temp workspace (read, write, delete, ls, shell), acks KV
set_blob requests, answers interaction queries from a script, and records every server message it
read, so tests check what the IDE saw.
"""
from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import subprocess
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from cursor_byok import hotpath
from cursor_byok.protocol import ConnectError, agent_pb2 as pb, aiserver_pb2, parse_end_stream
from tests.harness.run_channel import RUN, RunStreams, envelope, h2_through_proxy  # noqa: F401 - RUN, envelope, h2_through_proxy for tests

RUN_SSE = "/agent.v1.AgentService/RunSSE"
BIDI_APPEND = "/aiserver.v1.BidiService/BidiAppend"
GRPC_WEB_PROTO = "application/grpc-web+proto"
# gRPC-Web's trailer frame (its end of stream), beside Connect's end-stream flag 0x02.
FLAG_GRPC_WEB_TRAILER = 0x80
# gRPC status numbers in order from 1 (0 is OK), the Connect codes of the same name.
GRPC_CODES = (
    "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists", "permission_denied",
    "resource_exhausted", "failed_precondition", "aborted", "out_of_range", "unimplemented", "internal", "unavailable",
    "data_loss", "unauthenticated",
)
TRANSPORTS = ("sse", "run", "run-via-proxy")  # the last: HTTP/2 in TLS through the intercepting proxy
# httpx's default TLS context, made once: a client made with the default builds its own (~50 ms of
# CPU), and the suite makes hundreds of IDEs.
DEFAULT_TLS = httpx.create_ssl_context()


def append_body(request_id: str, seqno: int, message: pb.AgentClientMessage, *, binary: bool = False, enveloped: bool = False, upper: bool = False) -> bytes:
    req = aiserver_pb2.BidiAppendRequest()
    req.request_id.request_id = request_id
    req.append_seqno = seqno
    raw = message.SerializeToString()
    if binary:
        req.data_binary = raw
    else:
        req.data = raw.hex().upper() if upper else raw.hex()
    body = req.SerializeToString()
    return envelope(body) if enveloped else body


def run_request(
    text: str,
    *,
    model: str,
    conversation_id: str | None,
    run_id: str | None = None,
    message_id: str | None = None,
    workspace: str | None = None,
    mode: int = pb.AGENT_MODE_AGENT,
) -> pb.AgentClientMessage:
    msg = pb.AgentClientMessage()
    rr = msg.run_request
    if conversation_id is not None:
        rr.conversation_id = conversation_id
    rr.run_id = run_id or uuid.uuid4().hex
    rr.requested_model.model_id = model
    uma = rr.action.user_message_action
    uma.user_message.text = text
    uma.user_message.message_id = message_id or uuid.uuid4().hex
    uma.user_message.mode = mode
    uma.request_context.SetInParent()  # as Cursor's IDE, which always sends one (else the server asks)
    if workspace:
        uma.request_context.env.workspace_paths.append(workspace)
        uma.request_context.env.os_version = "linux"
        uma.request_context.env.shell = "bash"
    return msg


def grpc_web_trailer(payload: bytes) -> dict[str, str]:
    """The fields of a gRPC-Web trailer frame's payload (HTTP/1-style header lines)."""
    fields = {}
    for line in payload.decode("latin-1").split("\r\n"):
        if line:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
    return fields


def grpc_web_error(trailer: dict[str, str]) -> ConnectError | None:
    """The error a gRPC-Web trailer carries (None for grpc-status 0)."""
    status = int(trailer["grpc-status"])
    return None if status == 0 else ConnectError(GRPC_CODES[status - 1], urllib.parse.unquote(trailer.get("grpc-message", "")))


def _fetched(ex: pb.ExecServerMessage, out: pb.ExecClientMessage) -> None:
    out.fetch_result.success.url = ex.fetch_args.url
    out.fetch_result.success.content = f"the page at {ex.fetch_args.url}"
    out.fetch_result.success.status_code = 200
    out.fetch_result.success.content_type = "text/plain"


def _typed(ex: pb.ExecServerMessage, out: pb.ExecClientMessage) -> None:
    out.write_shell_stdin_result.success.shell_id = ex.write_shell_stdin_args.shell_id


def _resources(ex: pb.ExecServerMessage, out: pb.ExecClientMessage) -> None:
    out.list_mcp_resources_exec_result.success.resources.add(uri="weather://oslo", name="Oslo", server="weather")


def _resource(ex: pb.ExecServerMessage, out: pb.ExecClientMessage) -> None:
    out.read_mcp_resource_exec_result.success.uri = ex.read_mcp_resource_exec_args.uri
    out.read_mcp_resource_exec_result.success.text = f"contents of {ex.read_mcp_resource_exec_args.uri}"


def _subagent_awaited(ex: pb.ExecServerMessage, out: pb.ExecClientMessage) -> None:
    done = out.subagent_await_result.complete
    done.agent_id = ex.subagent_await_args.agent_id
    done.tool_call_count = 2
    done.final_message = f"{ex.subagent_await_args.agent_id} is done: all tests pass"


def _spawned(ex: pb.ExecServerMessage, out: pb.ExecClientMessage) -> None:
    spawn = out.background_shell_spawn_result.success
    spawn.shell_id, spawn.command = 11, ex.background_shell_spawn_args.command
    spawn.working_directory = ex.background_shell_spawn_args.working_directory


_CLIENT_RUN_RESULTS = {
    "background_shell_spawn_args": _spawned,
    "subagent_await_args": _subagent_awaited,
    "fetch_args": _fetched,
    "write_shell_stdin_args": _typed,
    "list_mcp_resources_exec_args": _resources,
    "read_mcp_resource_exec_args": _resource,
}


def action_message(**kwargs: object) -> pb.AgentClientMessage:
    msg = pb.AgentClientMessage()
    for name, value in kwargs.items():
        getattr(msg.conversation_action, name).CopyFrom(value)  # type: ignore[arg-type]
    return msg


def cancel_message() -> pb.AgentClientMessage:
    msg = pb.AgentClientMessage()
    msg.conversation_action.cancel_action.SetInParent()
    return msg


def heartbeat_message() -> pb.AgentClientMessage:
    msg = pb.AgentClientMessage()
    msg.client_heartbeat.SetInParent()
    return msg


async def gauge_reaches(client: httpx.AsyncClient, name: str, value: int, timeout: float = 10.0) -> None:
    """Return once the server's (`client`'s base URL) /metrics gauge `name` reads `value`: the
    server has seen what the gauge counts (not merely the kernel, which accepts a connection first)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        page = (await client.get("/metrics")).text
        if f"{name} {float(value)}" in page:
            return
        assert asyncio.get_running_loop().time() < deadline, page
        await asyncio.sleep(0.01)


async def appends_waiting(client: httpx.AsyncClient, count: int, timeout: float = 10.0) -> None:
    """Return once the server has `count` appends waiting for their seqno 0: a later append sent
    first is in, its seqno 0 may follow."""
    await gauge_reaches(client, "cursor_byok_appends_waiting", count, timeout)


@dataclass
class StreamLog:
    """Everything one RunSSE stream delivered."""

    messages: list[pb.AgentServerMessage] = field(default_factory=list)
    terminal: ConnectError | None = None
    terminals: int = 0
    raw: bytearray = field(default_factory=bytearray)
    broken: bool = False
    trailer: dict[str, str] | None = None  # a gRPC-Web stream's trailer frame

    @property
    def finished(self) -> bool:
        return self.terminals > 0

    def updates(self, kind: str) -> list[object]:
        out = []
        for m in self.messages:
            if m.WhichOneof("message") == "interaction_update" and m.interaction_update.WhichOneof("message") == kind:
                out.append(getattr(m.interaction_update, kind))
        return out

    def kinds(self) -> list[str]:
        out = []
        for m in self.messages:
            k = m.WhichOneof("message") or "?"
            if k == "interaction_update":
                k = m.interaction_update.WhichOneof("message") or "?"
            out.append(k)
        return out

    @property
    def text(self) -> str:
        return "".join(u.text for u in self.updates("text_delta"))  # type: ignore[attr-defined]


class ScriptedIDE:
    """One IDE talking to one server. Each request id gets its own append seqno counter (RunSSE +
    BidiAppend) or its own Run stream."""

    def __init__(
        self,
        base_url: str,
        workspace: Path | None = None,
        *,
        http2: bool = False,
        transport: str = "sse",
        proxy: tuple[int, Path] | None = None,
        grpc_web: bool = False,
        client: Callable[[], httpx.AsyncClient] | None = None,
    ) -> None:
        """`proxy`: (port, CA file) of the intercepting proxy, for transport "run-via-proxy".
        `grpc_web`: RunSSE and BidiAppend as gRPC-Web (enveloped requests, a trailer frame last).
        `client`: makes the HTTP client of RunSSE and BidiAppend (TLS, a proxy, headers) instead
        of the plain one on `base_url`."""
        assert transport in TRANSPORTS
        self.transport = "run" if transport == "run-via-proxy" else transport
        assert transport != "run-via-proxy" or proxy is not None, "the run-via-proxy transport needs the proxy's port and CA file"
        self.run_streams = RunStreams(base_url, proxy if transport == "run-via-proxy" else None)
        self.base_url = base_url.rstrip("/")
        self.http2 = http2
        self.grpc_web = grpc_web
        self._make_client = client
        self.client = self._client()
        self.workspace = workspace
        self.seqnos: dict[str, int] = {}
        self.exec_log: list[pb.ExecServerMessage] = []
        self.answers: dict[str, Callable[[pb.InteractionQuery], pb.InteractionResponse]] = {}
        self.auto_exec = True
        self.hold_execs = False  # when True, exec requests are recorded but not answered
        self.hold_kv = False  # when True, set_blob requests are recorded but not acked
        self.held_kv: list[tuple[str, int]] = []  # (request id, kv id) of the set_blobs not acked
        self.kv_log: list[pb.KvServerMessage] = []
        self.blobs: dict[bytes, bytes] = {}  # what the IDE stores for the server (KV set_blob)
        self.corrupt_blobs = False  # answer get_blob with bytes that do not hash to the id
        self.held: list[tuple[str, pb.ExecServerMessage]] = []
        # MCP servers the IDE has: server id → tool name → handler(args) -> text
        self.mcp_servers: dict[str, dict[str, Callable[[dict], str]]] = {}
        # A terminals folder: commands starting with "background:" move to the background there.
        self.terminals: Path | None = None
        self.next_shell_id = 100
        # Across a server crash, as Cursor: an append that got no answer is kept and sent again
        # (`resend_unacked`) instead of failing the caller; `acked` is every append answered 200.
        self.tolerate_crashes = False
        self.unacked: dict[tuple[str, int], tuple[bytes, pb.AgentClientMessage]] = {}
        # How many times an append that got no answer is sent again at once, as Cursor does when a
        # connection drops under it (the server is up): a resend of a received one is a duplicate.
        self.resend_attempts = 0
        self.acked: list[tuple[str, int, pb.AgentClientMessage]] = []

    def _client(self) -> httpx.AsyncClient:
        if self._make_client is not None:
            return self._make_client()
        # http2: prior-knowledge h2c (httpx speaks HTTP/2 on plain http only with HTTP/1.1 off).
        return httpx.AsyncClient(base_url=self.base_url, timeout=30.0, http1=not self.http2, http2=self.http2, verify=DEFAULT_TLS)

    async def close(self) -> None:
        await self.client.aclose()
        await self.run_streams.close()

    async def reconnect(self, base_url: str | None = None) -> None:
        """The server went away and came back (a restart): new connections, the same IDE state
        (seqnos, blobs, held execs), as Cursor keeps its own across a server restart."""
        await self.client.aclose()
        if base_url is not None:
            self.base_url = base_url.rstrip("/")
        self.client = self._client()

    # -- raw calls -----------------------------------------------------------------------------------
    async def append(self, request_id: str, message: pb.AgentClientMessage, *, seqno: int | None = None, headers: dict[str, str] | None = None, **kw: bool) -> httpx.Response:
        if self.transport == "run":
            return await self.run_streams.append(request_id, message, headers)  # type: ignore[return-value]
        if seqno is None:
            seqno = self.seqnos.get(request_id, 0)
        self.seqnos[request_id] = max(self.seqnos.get(request_id, 0), seqno + 1)
        body = append_body(request_id, seqno, message, **kw)
        self.unacked[(request_id, seqno)] = (body, message)
        return await self._post_append(request_id, seqno, body, message, headers)  # type: ignore[return-value]

    async def _post_append(
        self, request_id: str, seqno: int, body: bytes, message: pb.AgentClientMessage, headers: dict[str, str] | None = None
    ) -> httpx.Response | None:
        for attempt in range(self.resend_attempts + 1):
            try:
                if self.grpc_web:
                    resp = await self.client.post(BIDI_APPEND, content=envelope(body), headers={"content-type": GRPC_WEB_PROTO, **(headers or {})})
                    _grpc_web_status(resp)
                else:
                    resp = await self.client.post(BIDI_APPEND, content=body, headers={"content-type": "application/proto", **(headers or {})})
                break
            except httpx.TransportError:
                if attempt < self.resend_attempts:
                    continue  # e.g. a kept-alive connection the server had just closed: send again
                if not self.tolerate_crashes:
                    raise
                return None  # no answer: kept in `unacked`
        self.unacked.pop((request_id, seqno), None)
        if resp.status_code == 200:
            self.acked.append((request_id, seqno, message))
        return resp

    async def resend_unacked(self) -> None:
        """Send again, in seqno order, every append that got no answer before the server died."""
        for (request_id, seqno), (body, message) in sorted(self.unacked.items()):
            await self._post_append(request_id, seqno, body, message)

    async def append_raw(self, request_id: str, raw: bytes) -> httpx.Response:
        """Append raw AgentClientMessage bytes (e.g. a variant from a newer client) in seqno order."""
        seqno = self.seqnos.get(request_id, 0)
        self.seqnos[request_id] = seqno + 1
        req = aiserver_pb2.BidiAppendRequest(data=raw.hex(), append_seqno=seqno)
        req.request_id.request_id = request_id
        return await self.client.post(BIDI_APPEND, content=req.SerializeToString(), headers={"content-type": "application/proto"})

    async def stream(
        self, request_id: str, log: StreamLog, *, enveloped: bool = True, stop: asyncio.Event | None = None, headers: dict[str, str] | None = None,
        gzip_request: bool = False,
    ) -> StreamLog:
        """Read one RunSSE (or Run) stream to its end (or until `stop` is set: a disconnect, made
        at once even while the server sends nothing; a Run stream is reset with CANCEL).
        `gzip_request`: the request's envelope compressed (connect-content-encoding or
        grpc-encoding: gzip)."""
        reading = asyncio.ensure_future(self._stream(request_id, log, enveloped, stop, headers, gzip_request))
        if stop is None:
            return await reading
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait((reading, stopping), return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not reading.done():
            self.run_streams.reset(request_id)
            reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        return log

    async def _stream(
        self, request_id: str, log: StreamLog, enveloped: bool, stop: asyncio.Event | None, headers: dict[str, str] | None,
        gzip_request: bool,
    ) -> StreamLog:
        def take(rid: str, decoder: hotpath.FrameDecoder, data: bytes) -> Awaitable[None]:
            # What a chunk makes the IDE do (acks, exec results: appends with their seqnos) is done
            # whole even when a stop cuts the read meanwhile: a seqno taken and never sent would
            # leave a gap the server waits on.
            work = self._take(rid, log, decoder, data)
            return work if stop is None else asyncio.shield(work)

        if self.transport == "run":
            log.broken = not await self.run_streams.read(request_id, take, stop)
            return log
        body = pb.BidiRequestId(request_id=request_id).SerializeToString()
        headers = {"content-type": GRPC_WEB_PROTO if self.grpc_web else "application/connect+proto", **(headers or {})}
        if gzip_request:
            body = envelope(gzip.compress(body), 1)
            headers["grpc-encoding" if self.grpc_web else "connect-content-encoding"] = "gzip"
        elif enveloped:
            body = envelope(body)
        decoder = hotpath.FrameDecoder()
        try:
            return await self._read_stream(request_id, log, body, decoder, take, stop, headers)
        except httpx.TransportError:
            log.broken = True  # the connection died (e.g. the server was killed)
            return log

    async def _read_stream(
        self, request_id: str, log: StreamLog, body: bytes, decoder: hotpath.FrameDecoder,
        take: Callable[[str, hotpath.FrameDecoder, bytes], Awaitable[None]], stop: asyncio.Event | None, headers: dict[str, str],
    ) -> StreamLog:
        async with self.client.stream("POST", RUN_SSE, content=body, headers=headers) as resp:
            assert resp.status_code == 200, resp.status_code
            async for chunk in resp.aiter_raw():
                await take(request_id, decoder, chunk)
                if stop is not None and stop.is_set():
                    return log
        decoder.close()
        return log

    async def _take(self, request_id: str, log: StreamLog, decoder: hotpath.FrameDecoder, data: bytes) -> None:
        """Record the frames of what the stream delivered and react to each as the IDE does."""
        log.raw.extend(data)
        for flags, payload in decoder.feed(data):
            if flags & FLAG_GRPC_WEB_TRAILER:
                log.terminals += 1
                log.trailer = grpc_web_trailer(payload)
                log.terminal = grpc_web_error(log.trailer)
            elif flags & hotpath.FLAG_END_STREAM:
                log.terminals += 1
                log.terminal = parse_end_stream(payload)
            else:
                item = pb.AgentServerMessage.FromString(payload)
                log.messages.append(item)
                await self._react(request_id, item)

    # -- reactions: what a real IDE does with server messages ---------------------------------------------
    async def _react(self, request_id: str, msg: pb.AgentServerMessage) -> None:
        kind = msg.WhichOneof("message")
        if kind == "kv_server_message":
            self.kv_log.append(msg.kv_server_message)
            kv = msg.kv_server_message
            if kv.WhichOneof("message") == "set_blob_args":
                self.blobs[kv.set_blob_args.blob_id] = kv.set_blob_args.blob_data
            elif kv.WhichOneof("message") == "get_blob_args":
                reply = pb.AgentClientMessage()
                reply.kv_client_message.id = kv.id
                data = self.blobs.get(kv.get_blob_args.blob_id)
                reply.kv_client_message.get_blob_result.SetInParent()
                if data is not None:
                    reply.kv_client_message.get_blob_result.blob_data = data + (b" " if self.corrupt_blobs else b"")
                await self.append(request_id, reply)
        if kind == "kv_server_message" and msg.kv_server_message.WhichOneof("message") == "set_blob_args":
            if self.hold_kv:
                self.held_kv.append((request_id, msg.kv_server_message.id))
            else:
                await self._ack_blob(request_id, msg.kv_server_message.id)
        elif kind == "exec_server_message":
            self.exec_log.append(msg.exec_server_message)
            if self.hold_execs:
                self.held.append((request_id, msg.exec_server_message))
            elif self.auto_exec:
                for reply in self.execute(msg.exec_server_message):
                    await self.append(request_id, reply)
        elif kind == "interaction_query":
            q = msg.interaction_query
            answer = self.answers.get(q.WhichOneof("query") or "")
            if answer is not None:
                reply = pb.AgentClientMessage()
                reply.interaction_response.CopyFrom(answer(q))
                reply.interaction_response.id = q.id
                await self.append(request_id, reply)

    async def turn(
        self,
        message: pb.AgentClientMessage,
        *,
        request_id: str | None = None,
        during: Callable[[str, StreamLog], Awaitable[None]] | None = None,
        timeout: float = 20.0,
    ) -> StreamLog:
        """One RunSSE stream with its first append: read it to the end. `during(request_id, log)`
        runs while the stream is open (to hold, answer or interrupt things mid-run)."""
        request_id = request_id or uuid.uuid4().hex
        log = StreamLog()
        reader = asyncio.create_task(self.stream(request_id, log))
        resp = await self.append(request_id, message)
        assert resp.status_code == 200, resp.text
        if during is not None:
            await during(request_id, log)
        await asyncio.wait_for(reader, timeout)
        return log

    async def _ack_blob(self, request_id: str, kv_id: int) -> None:
        reply = pb.AgentClientMessage()
        reply.kv_client_message.id = kv_id
        reply.kv_client_message.set_blob_result.SetInParent()
        await self.append(request_id, reply)

    async def release_kv(self) -> None:
        """Ack the set_blobs held so far (and those that come after: `hold_kv` is cleared)."""
        self.hold_kv = False
        held, self.held_kv = self.held_kv, []
        for request_id, kv_id in held:
            await self._ack_blob(request_id, kv_id)

    async def release_held(self) -> None:
        held, self.held = self.held, []
        for request_id, exec_msg in held:
            for reply in self.execute(exec_msg):
                await self.append(request_id, reply)

    def _background_shell(self, ex: pb.ExecServerMessage, reply: Callable[[], pb.AgentClientMessage], command: str, cwd: str) -> list[pb.AgentClientMessage]:
        """Answer 'moved to the background', then run the command and write its terminal file."""
        assert self.terminals is not None
        shell_id = self.next_shell_id
        self.next_shell_id += 1
        path = self.terminals / f"{shell_id}.txt"
        path.write_text(_terminal_file(command, cwd, "", None))
        proc = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=30)
        self.finish_background = lambda: path.write_text(_terminal_file(command, cwd, proc.stdout, proc.returncode))
        start = reply()
        start.exec_client_message.shell_stream.start.SetInParent()
        moved = reply()
        bg = moved.exec_client_message.shell_stream.backgrounded
        bg.shell_id = shell_id
        bg.command = command
        bg.working_directory = cwd
        return [start, moved]

    # -- executing exec messages against the workspace ------------------------------------------------------
    def _path(self, p: str) -> Path:
        path = Path(p)
        if not path.is_absolute() and self.workspace is not None:
            path = self.workspace / path
        return path

    def execute(self, ex: pb.ExecServerMessage) -> list[pb.AgentClientMessage]:
        kind = ex.WhichOneof("message")

        def reply() -> pb.AgentClientMessage:
            m = pb.AgentClientMessage()
            m.exec_client_message.id = ex.id
            m.exec_client_message.exec_id = ex.exec_id
            return m

        if kind == "request_context_args":  # asked when a run request came without one
            m = reply()
            env = m.exec_client_message.request_context_result.success.request_context.env
            if self.workspace is not None:
                env.workspace_paths.append(str(self.workspace))
                env.terminals_folder = str(self.workspace / "terminals")
            env.os_version, env.shell = "linux", "bash"
            return [m]
        if kind in _CLIENT_RUN_RESULTS:  # what the client's own executor does: a fixed success
            m = reply()
            _CLIENT_RUN_RESULTS[kind](ex, m.exec_client_message)
            return [m]
        if kind == "read_args":
            m = reply()
            path = self._path(ex.read_args.path)
            if not path.exists():
                m.exec_client_message.read_result.file_not_found.SetInParent()
            else:
                text = path.read_text()
                s = m.exec_client_message.read_result.success
                s.path = str(path)
                s.content = text
                s.total_lines = text.count("\n") + 1
                s.file_size = len(text.encode())
            return [m]
        if kind == "write_args":
            m = reply()
            path = self._path(ex.write_args.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(ex.write_args.file_text)
            s = m.exec_client_message.write_result.success
            s.path = str(path)
            s.lines_created = ex.write_args.file_text.count("\n") + 1
            s.file_size = len(ex.write_args.file_text.encode())
            return [m]
        if kind == "delete_args":
            m = reply()
            path = self._path(ex.delete_args.path)
            if path.exists():
                path.unlink()
                m.exec_client_message.delete_result.success.SetInParent()
            else:
                m.exec_client_message.delete_result.file_not_found.SetInParent()
            return [m]
        if kind in ("shell_stream_args", "shell_args"):
            args = getattr(ex, kind)
            cwd = args.working_directory or (str(self.workspace) if self.workspace else os.getcwd())
            if self.terminals is not None and args.command.startswith("background:"):
                return self._background_shell(ex, reply, args.command.removeprefix("background:"), cwd)
            proc = subprocess.run(["bash", "-c", args.command], cwd=cwd, capture_output=True, text=True, timeout=30)
            out: list[pb.AgentClientMessage] = []
            start = reply()
            start.exec_client_message.shell_stream.start.SetInParent()
            out.append(start)
            if proc.stdout:
                m = reply()
                m.exec_client_message.shell_stream.stdout.data = proc.stdout
                out.append(m)
            if proc.stderr:
                m = reply()
                m.exec_client_message.shell_stream.stderr.data = proc.stderr
                out.append(m)
            m = reply()
            m.exec_client_message.shell_stream.exit.code = proc.returncode
            m.exec_client_message.shell_stream.exit.cwd = cwd
            out.append(m)
            return out
        if kind == "mcp_args":
            m = reply()
            a = ex.mcp_args
            handler = self.mcp_servers.get(a.provider_identifier or a.server_identifier, {}).get(a.tool_name or a.name)
            if handler is None:
                m.exec_client_message.mcp_result.tool_not_found.SetInParent()
            else:
                from google.protobuf.json_format import MessageToDict

                item = m.exec_client_message.mcp_result.success.content.add()
                item.text.text = handler(MessageToDict(a)["args"] if a.args else {})
            return [m]
        if kind == "grep_args":
            m = reply()
            g = ex.grep_args
            root = self._path(g.path or ".")
            cmd = ["grep", "-rn" if g.output_mode != "files_with_matches" else "-rl", g.pattern, str(root)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            s = m.exec_client_message.grep_result.success
            s.pattern = g.pattern
            s.path = str(root)
            s.output_mode = g.output_mode or "content"
            _fill_grep(s, str(root), proc.stdout, g.output_mode)
            return [m]
        if kind == "ls_args":
            m = reply()
            m.exec_client_message.ls_result.SetInParent()
            return [m]
        # Unknown: reply with a throw so the server's tool completes as an error.
        m = pb.AgentClientMessage()
        m.exec_client_control_message.throw.id = ex.id
        m.exec_client_control_message.throw.error = f"scripted IDE cannot execute {kind}"
        return [m]


def _terminal_file(command: str, cwd: str, output: str, exit_code: int | None) -> str:
    head = f"---\ncommand: {command}\ncwd: {cwd}\n---\n"
    tail = f"---\nexit_code: {exit_code}\nelapsed_ms: 5\n---\n" if exit_code is not None else ""
    return head + output + tail


def _fill_grep(success: pb.GrepSuccess, root: str, stdout: str, mode: str) -> None:
    union = success.workspace_results[root]
    if mode == "files_with_matches":
        union.files.files.extend(line for line in stdout.splitlines() if line)
        return
    content = union.content
    by_file: dict[str, list[tuple[int, str]]] = {}
    for line in stdout.splitlines():
        path, _, rest = line.partition(":")
        num, _, text = rest.partition(":")
        if num.isdigit():
            by_file.setdefault(path, []).append((int(num), text))
    for path, lines in by_file.items():
        fm = content.matches.add()
        fm.file = path
        for num, text in lines:
            cm = fm.matches.add()
            cm.line_number = num
            cm.content = text


def _grpc_web_status(resp: httpx.Response) -> None:
    """A gRPC-Web reply is 200 whatever happened: its trailer frame's status, as an HTTP status
    (`http_status_for`), so callers check it as they check a Connect reply's."""
    from cursor_byok.protocol import http_status_for

    decoder = hotpath.FrameDecoder()
    for flags, payload in decoder.feed(resp.content):
        if flags & FLAG_GRPC_WEB_TRAILER:
            error = grpc_web_error(grpc_web_trailer(payload))
            if error is not None:
                resp.status_code = http_status_for(error.code)
