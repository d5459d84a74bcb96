"""Cursor's SDK over HTTP/1.1 byte for byte, on raw sockets (not httpx): each request a keep-alive
POST with a chunked body (the BidiRequestId frame, then the zero chunk), and a cancel that closes
the RunSSE connection. What the SDK interop test saw, reproduced without Node:

- the server sees that close at once: the next prompt takes over the abandoned run, whose provider
  stream is closed, and the abandoned turn is not asked of the model again;
- the connection warden never ends a connection whose RunSSE is in progress, however long its turn
  outlives `server.header_read_timeout_seconds` (granian names the client port as a string; the
  gateway had noted requests under it, and the warden, looking up the int port, took every such
  connection for one that never sent a head).
"""
from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h11

from cursor_byok import hotpath
from cursor_byok.protocol import ConnectError, agent_pb2 as pb, parse_end_stream
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import RUN_SSE, ScriptedIDE, cancel_message, envelope, run_request
from tests.harness.server import ServerConfig, ServerProcess, one_model_config

from .test_abandoned_run import held_text
from .test_lifecycle import wait_until

MODEL = "byok-sdk-wire"
BOUND = 20.0  # how long a test waits for the event it expects
LONG = 60.0  # a grace no test waits out


class SdkConnection:
    """One keep-alive HTTP/1.1 connection as the SDK's transport drives it (blocking: run its
    reads in a thread)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
        self.http = h11.Connection(h11.CLIENT)
        self.frames = hotpath.FrameDecoder()

    def run_sse(self, request_id: str) -> None:
        """Send RunSSE (one BidiRequestId frame in a chunked body); the server answers once the
        run's first BidiAppend came."""
        headers = [
            ("host", f"127.0.0.1:{self.port}"),
            ("content-type", "application/connect+proto"),
            ("connect-protocol-version", "1"),
            ("x-request-id", request_id),
            ("x-cursor-streaming", "true"),
            ("x-cursor-client-type", "sdk"),
            ("connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
        ]
        body = envelope(pb.BidiRequestId(request_id=request_id).SerializeToString())
        for event in (h11.Request(method="POST", target=RUN_SSE, headers=headers), h11.Data(data=body), h11.EndOfMessage()):
            self.sock.sendall(self.http.send(event) or b"")

    def read_until(self, done: Callable[[StreamRead], bool]) -> StreamRead:
        """Read the stream until `done(what was read)`, or to its end."""
        read = StreamRead()
        while not done(read):
            event = self._next()
            if isinstance(event, h11.Response):
                assert event.status_code == 200, event
                continue
            if isinstance(event, h11.EndOfMessage):
                return read
            assert isinstance(event, h11.Data), event
            for flags, payload in self.frames.feed(bytes(event.data)):
                if flags & hotpath.FLAG_END_STREAM:
                    read.terminal = parse_end_stream(payload)
                    read.terminals += 1
                else:
                    read.take(pb.AgentServerMessage.FromString(payload))
        return read

    def _next(self) -> h11.Event:
        while True:
            event = self.http.next_event()
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            # a connection ended before the response did makes h11 raise RemoteProtocolError
            self.http.receive_data(self.sock.recv(65536))

    def close(self) -> None:
        """The SDK's cancel: the socket is closed in the middle of the response."""
        self.sock.close()


@dataclass
class StreamRead:
    """What one stretch of reading a RunSSE stream delivered."""

    text: str = ""
    terminal: ConnectError | None = None
    terminals: int = 0

    def take(self, message: pb.AgentServerMessage) -> None:
        if message.WhichOneof("message") == "interaction_update" and message.interaction_update.WhichOneof("message") == "text_delta":
            self.text += message.interaction_update.text_delta.text


def has_text(read: StreamRead) -> bool:
    return bool(read.text)


def config(tmp_path: Path, provider: FakeProviderServer, **server: float) -> ServerConfig:
    extra = {"reattach_grace_seconds": LONG, "blob_ack_timeout_seconds": LONG, **server}
    return one_model_config(tmp_path / "data", provider.url, MODEL, extra_server=extra)


def closed_by_server(port: int) -> None:
    """Connect, send nothing, and return once the server ends the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as sock:
        while sock.recv(1):
            pass


async def test_the_sdks_close_of_runsse_is_seen_at_once(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    """The SDK cancels on the first text by closing its RunSSE connection; its next prompt is
    answered at once (the reattach grace is long: only the close can end the first run)."""
    provider.enqueue(held_text("working on it"), OPENAI_CHAT.text(["fresh answer"]))
    conv = uuid.uuid4().hex
    with ServerProcess(config(tmp_path, provider)) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        sdk = SdkConnection(server.port)
        try:
            rid = uuid.uuid4().hex
            sdk.run_sse(rid)
            assert (await ide.append(rid, run_request("a long task", model=MODEL, conversation_id=conv))).status_code == 200
            first = await asyncio.to_thread(sdk.read_until, has_text)
            assert first.text == "working on it", first
            sdk.close()
            second = await ide.turn(run_request("something else", model=MODEL, conversation_id=conv), timeout=BOUND)
            await wait_until(provider.requests[0].disconnected.is_set, BOUND)
        finally:
            sdk.close()
            await ide.close()
    assert second.text == "fresh answer" and second.terminal is None
    assert len(provider.requests) == 2 and "something else" in provider.requests[1].body.decode()


async def test_a_runsse_in_progress_outlives_the_header_read_timeout(
    tmp_path: Path, provider: FakeProviderServer, workspace: Path
) -> None:
    """A turn longer than server.header_read_timeout_seconds keeps its RunSSE connection: an idle
    connection opened after it is ended (the warden's deadline has passed for both), the stream
    still delivers its end."""
    provider.enqueue(held_text("working on it"))
    limits = {"header_read_timeout_seconds": 1.0, "first_byte_timeout_seconds": 1.0}
    with ServerProcess(config(tmp_path, provider, **limits)) as server:
        ide = ScriptedIDE(server.base_url, workspace)
        sdk = SdkConnection(server.port)
        try:
            rid = uuid.uuid4().hex
            sdk.run_sse(rid)
            assert (await ide.append(rid, run_request("a long task", model=MODEL, conversation_id=uuid.uuid4().hex))).status_code == 200
            assert (await asyncio.to_thread(sdk.read_until, has_text)).text == "working on it"
            await asyncio.wait_for(asyncio.to_thread(closed_by_server, server.port), BOUND)
            assert (await ide.append(rid, cancel_message())).status_code == 200
            rest = await asyncio.to_thread(sdk.read_until, lambda read: read.terminals > 0)
        finally:
            sdk.close()
            await ide.close()
    assert rest.terminals == 1 and rest.terminal is not None and rest.terminal.code == "canceled", rest.terminal
