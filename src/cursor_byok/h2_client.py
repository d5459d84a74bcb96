"""A small full-duplex HTTP/2 client on the `h2` state machine: one connection, many streams, each
able to send its request body while its response streams back (httpx's HTTP/2 sends the whole body
before it reads the response, which a bidi stream such as Cursor's `Run` cannot wait for).

Used by the intercepting proxy to relay HTTP/2 streams to the gateway, and by the upstream
passthrough to relay a `Run` stream to Cursor.
"""
from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Sequence

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

READ_SIZE = 64 * 1024
WINDOW = 16 * 1024 * 1024  # per stream and connection: a fast producer is never held up by us

Headers = list[tuple[str, str]]


class FlowControl:
    """What sending DATA on one connection needs: its state machine, its writer, a lock so that
    one stream's frames are not interleaved mid-call, and a wake-up when the peer opens a window."""

    def __init__(self, conn: h2.connection.H2Connection, writer: asyncio.StreamWriter) -> None:
        self.conn = conn
        self.writer = writer
        self.lock = asyncio.Lock()
        self.window_open = asyncio.Event()


async def send_data(flow: FlowControl, stream_id: int, data: bytes, end: bool, gone: Callable[[], bool]) -> None:
    """Send `data` on a stream as the peer's flow-control windows allow (waiting for them to
    open); raises StreamReset once `gone()` says the stream or connection ended."""
    view = memoryview(data)
    conn = flow.conn
    while True:
        if gone():
            raise StreamReset("stream closed")
        async with flow.lock:
            window = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
            if window > 0 or not view:
                chunk, view = view[:window], view[window:]
                conn.send_data(stream_id, bytes(chunk), end_stream=end and not view)
                flow.writer.write(conn.data_to_send())
                await flow.writer.drain()
                if not view:
                    return
                continue
            flow.window_open.clear()
        await flow.window_open.wait()


class StreamReset(Exception):
    """The stream was reset by the peer, or the connection ended before the stream did."""


class H2Stream:
    def __init__(self, client: H2Client, stream_id: int) -> None:
        self._client = client
        self.stream_id = stream_id
        self._response: asyncio.Future[tuple[int, Headers]] = asyncio.get_running_loop().create_future()
        self._data: asyncio.Queue[bytes | None | BaseException] = asyncio.Queue()
        self.trailers: Headers = []
        self.closed = False

    async def response(self) -> tuple[int, Headers]:
        """The response status and headers (raises StreamReset)."""
        return await asyncio.shield(self._response)

    async def read(self) -> bytes | None:
        """The next piece of the response body; None at its end (raises StreamReset)."""
        item = await self._data.get()
        if isinstance(item, BaseException):
            self._data.put_nowait(item)  # every later read fails the same way
            raise item
        if item is None:
            self._data.put_nowait(None)
            return None
        self._client._consumed(self.stream_id, len(item))
        return item

    async def send(self, data: bytes, *, end: bool = False) -> None:
        await self._client._send_data(self.stream_id, data, end)

    async def end(self) -> None:
        await self._client._send_data(self.stream_id, b"", True)

    def reset(self) -> None:
        self._client._reset(self.stream_id)

    # -- from the connection's reader --------------------------------------------------------------
    def _on_response(self, status: int, headers: Headers) -> None:
        if not self._response.done():
            self._response.set_result((status, headers))

    def _fail(self, exc: BaseException) -> None:
        self.closed = True
        if not self._response.done():
            self._response.set_exception(exc)
            self._response.exception()  # retrieved: a stream nobody asked about stays quiet
        self._data.put_nowait(exc)


class H2Client:
    """One HTTP/2 connection (h2c with prior knowledge, or TLS with ALPN h2)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self._streams: dict[int, H2Stream] = {}
        self._flow = FlowControl(self._conn, writer)
        self._pump: asyncio.Task[None] | None = None
        self.closed = False

    @classmethod
    async def connect(
        cls, host: str, port: int, *, tls: ssl.SSLContext | None = None, server_hostname: str | None = None, timeout: float = 10.0
    ) -> H2Client:
        if tls is not None:
            tls.set_alpn_protocols(["h2"])
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=tls, server_hostname=server_hostname if tls else None), timeout
        )
        return cls.over(reader, writer)

    @classmethod
    def over(cls, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> H2Client:
        """HTTP/2 on a connection already open (TLS done, if any); raises ConnectionError when TLS
        did not settle on h2."""
        tls = writer.get_extra_info("ssl_object")
        if tls is not None and tls.selected_alpn_protocol() != "h2":
            writer.close()
            raise ConnectionError(f"{writer.get_extra_info('peername')} does not speak HTTP/2")
        client = cls(reader, writer)
        client._conn.initiate_connection()
        client._conn.increment_flow_control_window(WINDOW - 65535)
        client._flush()
        client._pump = asyncio.get_running_loop().create_task(client._read_loop())
        return client

    async def request(self, headers: Sequence[tuple[str, str]], *, end: bool = False) -> H2Stream:
        """Open a stream with these headers (pseudo-headers first)."""
        if self.closed:
            raise StreamReset("connection closed")
        stream_id = self._conn.get_next_available_stream_id()
        stream = H2Stream(self, stream_id)
        self._streams[stream_id] = stream
        self._conn.send_headers(stream_id, list(headers), end_stream=end)
        self._conn.increment_flow_control_window(WINDOW - 65535, stream_id=stream_id)
        await self._drain()
        return stream

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(Exception):
                self._conn.close_connection()
                self._flush()
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(BaseException):
                await self._pump
        self._writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._writer.wait_closed(), 2)
        self._fail_all(StreamReset("connection closed"))

    # -- internals -----------------------------------------------------------------------------------
    def _flush(self) -> None:
        data = self._conn.data_to_send()
        if data:
            self._writer.write(data)

    async def _drain(self) -> None:
        self._flush()
        await self._writer.drain()

    def _consumed(self, stream_id: int, size: int) -> None:
        with contextlib.suppress(h2.exceptions.ProtocolError, h2.exceptions.StreamClosedError):
            self._conn.acknowledge_received_data(size, stream_id)
            self._flush()

    def _reset(self, stream_id: int) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is not None and not self.closed:
            with contextlib.suppress(h2.exceptions.ProtocolError, h2.exceptions.StreamClosedError):
                self._conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
                self._flush()

    async def _send_data(self, stream_id: int, data: bytes, end: bool) -> None:
        await send_data(self._flow, stream_id, data, end, lambda: self.closed or stream_id not in self._streams)

    async def _read_loop(self) -> None:
        error: BaseException = StreamReset("connection closed")
        try:
            while True:
                data = await self._reader.read(READ_SIZE)
                if not data:
                    break
                for event in self._conn.receive_data(data):
                    self._on_event(event)
                self._flush()
        except (ConnectionError, OSError, h2.exceptions.ProtocolError) as exc:
            error = StreamReset(f"connection failed: {exc}")
        finally:
            self.closed = True
            self._fail_all(error)

    def _on_event(self, event: h2.events.Event) -> None:
        stream = self._streams.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, h2.events.ResponseReceived) and stream is not None:
            headers = [(k, v) for k, v in event.headers]
            status = int(next((v for k, v in headers if k == ":status"), "0"))
            stream._on_response(status, [(k, v) for k, v in headers if not k.startswith(":")])
        elif isinstance(event, h2.events.DataReceived):
            if stream is not None:
                stream._data.put_nowait(event.data)
            elif event.flow_controlled_length:
                self._conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.TrailersReceived) and stream is not None:
            stream.trailers = [(k, v) for k, v in event.headers]
        elif isinstance(event, h2.events.StreamEnded) and stream is not None:
            stream.closed = True
            stream._data.put_nowait(None)
            self._streams.pop(event.stream_id, None)
        elif isinstance(event, h2.events.StreamReset) and stream is not None:
            self._streams.pop(event.stream_id, None)
            stream._fail(StreamReset(f"stream reset by the peer (code {event.error_code})"))
        elif isinstance(event, h2.events.WindowUpdated):
            self._flow.window_open.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closed = True
            self._fail_all(StreamReset("the peer closed the connection"))

    def _fail_all(self, exc: BaseException) -> None:
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            if not stream.closed:
                stream._fail(exc)
        self._flow.window_open.set()
