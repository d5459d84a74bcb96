"""HTTP/2 inside a terminated TLS tunnel (ALPN `h2`): each stream the IDE opens is relayed to the
gateway as a stream of one plaintext HTTP/2 connection (h2c), both directions at once, so that
Cursor's `Run` bidi stream works through the proxy as it does directly. Headers are rewritten as
for HTTP/1.1 (the original URL in `x-server-upstream-url`, the proxy's own gateway headers); a
reset on either side resets the other; the IDE's connection ending ends them all.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import Protocol

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import httpx

from ..h2_client import READ_SIZE, WINDOW, FlowControl, H2Client, H2Stream, StreamReset, send_data
from .http1 import HOP_BY_HOP

log = logging.getLogger("cursor_byok.interceptor")

# HTTP/2 forbids connection-specific fields (RFC 9113 8.2.2); `te` may only say "trailers".
_DROP = HOP_BY_HOP | {"host"}


class Origin(Protocol):
    def url(self, path: str) -> str: ...


class _ClientStream:
    """One stream the IDE opened: its request body as it arrives, and its relay task."""

    def __init__(self) -> None:
        self.body: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.upstream: H2Stream | None = None


class H2Relay:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        origin: Origin,
        gateway: httpx.URL,
        gateway_headers: Sequence[tuple[str, str]],
        upstream_url_header: str,
        on_request: Callable[[], None],
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._origin = origin
        self._gateway = gateway
        self._gateway_headers = list(gateway_headers)
        self._upstream_url_header = upstream_url_header
        self._on_request = on_request
        self._conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self._flow = FlowControl(self._conn, writer)
        self._streams: dict[int, _ClientStream] = {}
        self._client: H2Client | None = None
        self._closed = False

    def open_streams(self) -> int:
        return len(self._streams)

    async def serve(self, idle_seconds: float) -> None:
        self._conn.initiate_connection()
        self._conn.increment_flow_control_window(WINDOW - 65535)
        self._flush()
        try:
            while True:
                async with asyncio.timeout(idle_seconds if not self._streams else None):
                    data = await self._reader.read(READ_SIZE)
                if not data:
                    break
                try:
                    events = self._conn.receive_data(data)
                except h2.exceptions.ProtocolError:
                    break
                for event in events:
                    self._on_event(event)
                self._flush()
        except TimeoutError:
            pass
        finally:
            self._closed = True
            for stream in list(self._streams.values()):
                if stream.task is not None:
                    stream.task.cancel()
            tasks = [s.task for s in self._streams.values() if s.task is not None]
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            if self._client is not None:
                await self._client.close()

    def _flush(self) -> None:
        data = self._conn.data_to_send()
        if data and not self._writer.is_closing():
            self._writer.write(data)

    def _on_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            stream = _ClientStream()
            self._streams[event.stream_id] = stream
            self._conn.increment_flow_control_window(WINDOW - 65535, stream_id=event.stream_id)
            stream.task = asyncio.get_running_loop().create_task(self._relay(event.stream_id, list(event.headers), stream))
            if event.stream_ended is not None:
                stream.body.put_nowait(None)
        elif isinstance(event, h2.events.DataReceived):
            stream = self._streams.get(event.stream_id)
            if stream is not None and event.data:
                stream.body.put_nowait(event.data)
            if stream is None or not event.data:
                self._ack(event.stream_id, event.flow_controlled_length)
            if stream is not None and event.stream_ended is not None:
                stream.body.put_nowait(None)
        elif isinstance(event, h2.events.StreamEnded):
            stream = self._streams.get(event.stream_id)
            if stream is not None:
                stream.body.put_nowait(None)
        elif isinstance(event, h2.events.StreamReset):
            stream = self._streams.pop(event.stream_id, None)
            if stream is not None:
                if stream.upstream is not None:
                    stream.upstream.reset()  # the gateway sees the client go: a detach
                if stream.task is not None:
                    stream.task.cancel()
        elif isinstance(event, h2.events.WindowUpdated):
            self._flow.window_open.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._closed = True

    def _ack(self, stream_id: int, size: int) -> None:
        if size:
            with contextlib.suppress(h2.exceptions.ProtocolError, h2.exceptions.StreamClosedError):
                self._conn.acknowledge_received_data(size, stream_id)
                self._flush()

    async def _gateway_client(self) -> H2Client:
        if self._client is None or self._client.closed:
            gw = self._gateway
            tls = ssl.create_default_context() if gw.scheme == "https" else None
            self._client = await H2Client.connect(gw.host, gw.port or (443 if tls else 80), tls=tls, server_hostname=gw.host)
        return self._client

    def _request_headers(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        pseudo = {k: v for k, v in headers if k.startswith(":")}
        path = pseudo.get(":path", "/")
        drop = _DROP | {self._upstream_url_header, *(name for name, _ in self._gateway_headers)}
        out = [
            (":method", pseudo.get(":method", "GET")),
            (":scheme", self._gateway.scheme),
            (":authority", self._gateway.netloc.decode("ascii")),
            (":path", path),
        ]
        out += [(k, v) for k, v in headers if not k.startswith(":") and k.lower() not in drop]
        out.append((self._upstream_url_header, self._origin.url(path)))
        out += self._gateway_headers
        return out

    async def _relay(self, stream_id: int, headers: list[tuple[str, str]], stream: _ClientStream) -> None:
        pump: asyncio.Task[None] | None = None
        try:
            self._on_request()
            try:
                upstream = await (await self._gateway_client()).request(self._request_headers(headers))
            except (OSError, StreamReset) as exc:
                self._respond_error(stream_id, 502, f"cursor-byok proxy: gateway unreachable: {exc.__class__.__name__}")
                return
            stream.upstream = upstream
            pump = asyncio.get_running_loop().create_task(self._pump_body(stream_id, stream, upstream))
            status, response_headers = await upstream.response()
            self._conn.send_headers(stream_id, [(":status", str(status))] + [(k, v) for k, v in response_headers if k.lower() not in _DROP])
            self._flush()
            while (data := await upstream.read()) is not None:
                await send_data(self._flow, stream_id, data, False, lambda: self._closed or stream_id not in self._streams)
            if upstream.trailers:
                self._conn.send_headers(stream_id, upstream.trailers, end_stream=True)
                self._flush()
            else:
                await send_data(self._flow, stream_id, b"", True, lambda: self._closed or stream_id not in self._streams)
        except StreamReset:
            self._reset(stream_id)
        except (h2.exceptions.ProtocolError, h2.exceptions.StreamClosedError, ConnectionError):
            pass
        finally:
            if pump is not None:
                pump.cancel()
            self._streams.pop(stream_id, None)

    async def _pump_body(self, stream_id: int, stream: _ClientStream, upstream: H2Stream) -> None:
        """The IDE's request body on to the gateway as it comes (acknowledged once sent on)."""
        with contextlib.suppress(StreamReset):
            while (data := await stream.body.get()) is not None:
                await upstream.send(data)
                self._ack(stream_id, len(data))
            await upstream.end()

    def _respond_error(self, stream_id: int, status: int, message: str) -> None:
        body = (message + "\n").encode()
        with contextlib.suppress(h2.exceptions.ProtocolError, h2.exceptions.StreamClosedError):
            self._conn.send_headers(stream_id, [(":status", str(status)), ("content-type", "text/plain; charset=utf-8")])
            self._conn.send_data(stream_id, body, end_stream=True)
            self._flush()

    def _reset(self, stream_id: int) -> None:
        with contextlib.suppress(h2.exceptions.ProtocolError, h2.exceptions.StreamClosedError):
            self._conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            self._flush()
