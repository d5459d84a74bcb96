"""A real HTTP/1.1 server on 127.0.0.1 (free port) that records every request and replays scripted
replies: SSE streams sent chunk by chunk, error statuses, stalls and cut connections.

It runs in its own threads, so it works the same from sync tests, async tests and subprocesses.
"""
from __future__ import annotations

import collections
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgspec

_MAX_STALL_SECONDS = 30.0


@dataclass
class Reply:
    """One scripted response. With `body` set it is sent whole (Content-Length); otherwise `chunks`
    are sent one HTTP chunk each (Transfer-Encoding: chunked), like a live SSE stream."""

    status: int = 200
    chunks: list[bytes] = field(default_factory=list)
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/event-stream"
    chunk_delay: float = 0.0
    stall_after: int | None = None  # after this many chunks, stop sending and hold the connection
    cut_after: int | None = None  # after this many chunks, drop the connection mid-body
    stall_head: bool = False  # send nothing at all, not even the status line, and hold the connection
    pause_after: int | None = None  # after this many chunks, wait for `resume` (set by the test), then go on
    resume: threading.Event | None = None


class _RawArray(msgspec.Struct):
    messages: list[msgspec.Raw] = []
    input: list[msgspec.Raw] = []


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    disconnected: threading.Event = field(default_factory=threading.Event)
    peer: tuple[str, int] | None = None  # the client's address: one per connection
    names: list[str] = field(default_factory=list)  # the header names as they came on the wire

    def json(self) -> Any:
        return msgspec.json.decode(self.body)

    def raw_items(self, key: str) -> list[bytes]:
        """The elements of the body's top-level `messages` or `input` array, exactly as sent."""
        raw = msgspec.json.decode(self.body, type=_RawArray)
        return [bytes(item) for item in getattr(raw, key)]


Responder = Callable[[RecordedRequest], Reply]


class _ListeningServer(ThreadingHTTPServer):
    # The default backlog (5) drops connection attempts when dozens of runs call the model at
    # once; each dropped SYN is retried a second later, which looks like a slow server.
    request_queue_size = 256


class FakeProviderServer:
    """`keep_alive=True` keeps connections open between replies (as real providers do) instead of
    closing each after its reply. HEAD requests (connection warm-ups) are answered 204 and recorded
    in `probes`, apart from `requests`."""

    def __init__(self, *, keep_alive: bool = False, tls: ssl.SSLContext | None = None, head_body: bytes = b"") -> None:
        """`tls`: serve HTTPS with this server context (its certificate is what clients verify);
        `head_body`: answer HEAD 200 with this body, as some servers wrongly do."""
        self.keep_alive = keep_alive
        self.head_body = head_body
        self.tls = tls
        self.requests: list[RecordedRequest] = []
        self.probes: list[RecordedRequest] = []
        self._replies: collections.deque[Reply] = collections.deque()
        self._responder: Responder | None = None
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._release = threading.Event()
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = _ListeningServer(("127.0.0.1", 0), Handler)
        if tls is not None:  # a client that refuses the certificate fails its handshake: no request
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, name="fake-provider", daemon=True
        )

    # ---- lifecycle -------------------------------------------------------------------------------
    def start(self) -> FakeProviderServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._release.set()  # ends stalls
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeProviderServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host}:{port}"

    # ---- scripting -------------------------------------------------------------------------------
    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def forget(self) -> None:
        """No recorded requests and no scripted replies left (a server shared by several tests)."""
        with self._lock:
            self.requests.clear()
            self._replies.clear()

    def respond_with(self, responder: Responder | None) -> None:
        """Answer with `responder(request)` once the queue is empty."""
        self._responder = responder

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        return self._wait_for(self.requests, count, timeout)

    def wait_for_probes(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        return self._wait_for(self.probes, count, timeout)

    def _wait_for(self, seen: list[RecordedRequest], count: int, timeout: float) -> list[RecordedRequest]:
        deadline = time.monotonic() + timeout
        with self._arrived:
            while len(seen) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"expected {count}, got {len(seen)}")
                self._arrived.wait(left)
            return list(seen)

    def _probed(self, request: RecordedRequest) -> None:
        with self._arrived:
            self.probes.append(request)
            self._arrived.notify_all()

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._arrived:
            self.requests.append(request)
            self._arrived.notify_all()
            if self._replies:
                return self._replies.popleft()
        if self._responder is not None:
            return self._responder(request)
        unscripted = b'{"error": {"message": "fake server: no scripted reply", "type": "server_error"}}'
        return Reply(status=500, body=unscripted, content_type="application/json")


class _Handler(BaseHTTPRequestHandler):
    owner: FakeProviderServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        return

    def do_GET(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self.owner._probed(self._recorded(b""))
        self.close_connection = not self.owner.keep_alive
        body = self.owner.head_body
        self.send_response(200 if body else 204)
        if body:
            self.send_header("content-length", str(len(body)))
        if not self.owner.keep_alive:
            self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self._serve()

    def _body(self) -> bytes:
        """The request body, framed by Content-Length or chunked (as a request relayed from HTTP/2)."""
        if "chunked" not in (self.headers.get("transfer-encoding") or "").lower():
            length = int(self.headers.get("content-length") or 0)
            return self.rfile.read(length) if length else b""
        body = b""
        while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
            body += self.rfile.read(size)
            self.rfile.readline()
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass
        return body

    def _serve(self) -> None:
        request = self._recorded(self._body())
        reply = self.owner._next_reply(request)
        if reply.stall_head:
            self.close_connection = True
            self._stall(request)
            return
        keep = self.owner.keep_alive and reply.cut_after is None and reply.stall_after is None
        self.close_connection = not keep
        self.send_response(reply.status)
        self.send_header("content-type", reply.content_type)
        if not keep:
            self.send_header("connection", "close")
        for key, value in reply.headers.items():
            self.send_header(key, value)
        if reply.body is not None:
            self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            return
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        try:
            for i, chunk in enumerate(reply.chunks):
                if reply.cut_after is not None and i >= reply.cut_after:
                    self._cut()
                    return
                if reply.stall_after is not None and i >= reply.stall_after:
                    self._stall(request)
                    return
                if i == reply.pause_after and reply.resume is not None:
                    reply.resume.wait(_MAX_STALL_SECONDS)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                if reply.chunk_delay:
                    time.sleep(reply.chunk_delay)
            if reply.cut_after is not None:
                self._cut()
                return
            if reply.stall_after is not None:
                self._stall(request)
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            request.disconnected.set()

    def _recorded(self, body: bytes) -> RecordedRequest:
        return RecordedRequest(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            peer=self.client_address[:2],
            names=list(self.headers.keys()),
        )

    def _cut(self) -> None:
        self.wfile.flush()
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _stall(self, request: RecordedRequest) -> None:
        """Hold the connection open without sending; note when the client hangs up."""
        self.connection.settimeout(0.02)
        deadline = time.monotonic() + _MAX_STALL_SECONDS
        while not self.owner._release.is_set() and time.monotonic() < deadline:
            try:
                data = self.connection.recv(1, socket.MSG_PEEK)
            except TimeoutError:
                continue
            except OSError:
                request.disconnected.set()
                return
            if not data:
                request.disconnected.set()
                return
            time.sleep(0.02)
