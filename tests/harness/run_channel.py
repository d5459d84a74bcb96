"""The scripted IDE's `Run` transport: one HTTP/2 stream per request id, on h2c or through the
intercepting proxy with TLS, whose request side carries what BidiAppend would."""
from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from cursor_byok import hotpath
from cursor_byok.h2_client import H2Client, H2Stream, StreamReset
from cursor_byok.protocol import agent_pb2 as pb

RUN = "/agent.v1.AgentService/Run"
CURSOR_HOST = "api2.cursor.sh"


def envelope(payload: bytes, flags: int = 0) -> bytes:
    return bytes([flags]) + len(payload).to_bytes(4, "big") + payload


async def h2_through_proxy(proxy_port: int, cafile: Path, host: str = CURSOR_HOST) -> H2Client:
    """HTTP/2 to a Cursor host as the IDE opens it through the intercepting proxy: CONNECT, then
    TLS (trusting our local CA) with ALPN h2."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    writer.write(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.split(b" ", 2)[1] == b"200", head
    ctx = ssl.create_default_context(cafile=str(cafile))
    ctx.set_alpn_protocols(["h2"])
    await writer.start_tls(ctx, server_hostname=host)
    return H2Client.over(reader, writer)


@dataclass
class Appended:
    """What an append over a Run stream returns: the message went onto the stream (or its queue)."""

    status_code: int = 200
    text: str = ""


@dataclass
class RunChannel:
    """The Run stream of one request id: what waits to be sent, and the stream once open."""

    queue: list[pb.AgentClientMessage] = field(default_factory=list)
    first: pb.AgentClientMessage | None = None  # resent when the IDE reopens the stream
    headers: dict[str, str] = field(default_factory=dict)
    stream: H2Stream | None = None
    queued: asyncio.Event = field(default_factory=asyncio.Event)


# What the IDE does with the bytes a stream delivered: (request id, decoder, data).
Take = Callable[[str, hotpath.FrameDecoder, bytes], Awaitable[None]]


class RunStreams:
    """The Run streams of one IDE, on one HTTP/2 connection (opened on first use)."""

    def __init__(self, base_url: str, proxy: tuple[int, Path] | None) -> None:
        """`proxy`: (port, CA file) of the intercepting proxy to go through, with TLS."""
        self.url = httpx.URL(f"https://{CURSOR_HOST}" if proxy is not None else base_url)
        self._direct = httpx.URL(base_url)
        self._proxy = proxy
        self._h2: H2Client | None = None
        self.channels: dict[str, RunChannel] = {}

    async def connection(self) -> H2Client:
        if self._h2 is None or self._h2.closed:
            if self._proxy is not None:
                self._h2 = await h2_through_proxy(*self._proxy)
            else:
                self._h2 = await H2Client.connect(self._direct.host, self._direct.port or 80)
        return self._h2

    async def close(self) -> None:
        if self._h2 is not None:
            await self._h2.close()

    async def append(self, request_id: str, message: pb.AgentClientMessage, headers: dict[str, str] | None) -> Appended:
        """An append is the next message on the request id's stream (queued until the stream
        opens; the first message of a stream not yet open starts it)."""
        channel = self.channels.setdefault(request_id, RunChannel())
        if headers:
            channel.headers.update(headers)
        if channel.stream is not None:
            try:
                await channel.stream.send(envelope(message.SerializeToString()))
                return Appended()
            except Exception as exc:  # noqa: BLE001 - the stream is gone: like a failed append
                return Appended(409, str(exc))
        if not channel.queue:
            channel.first = message
        channel.queue.append(message)
        channel.queued.set()
        return Appended()

    def reset(self, request_id: str) -> None:
        """The IDE gives up the request id's open Run stream: RST_STREAM CANCEL."""
        channel = self.channels.get(request_id)
        if channel is not None and channel.stream is not None:
            channel.stream.reset()

    async def read(self, request_id: str, take: Take, stop: asyncio.Event | None) -> bool:
        """Open the request id's Run stream (once its first message is there; a reopened stream
        starts with the first message again), send what was queued, hand what arrives to `take`
        until the end (or `stop`). False when the stream or its connection broke."""
        channel = self.channels.setdefault(request_id, RunChannel())
        while not channel.queue and channel.first is None:
            channel.queued.clear()
            await channel.queued.wait()
        client = await self.connection()
        head = [(":method", "POST"), (":scheme", self.url.scheme), (":authority", self.url.netloc.decode()), (":path", RUN)]
        head += [("content-type", "application/connect+proto"), ("connect-protocol-version", "1"), ("x-request-id", request_id)]
        head += list(channel.headers.items())
        try:
            stream = await client.request(head)
            if not channel.queue:
                assert channel.first is not None
                channel.queue.append(channel.first)
            # What is queued goes in one write, as a client sends what it has at once; appends made
            # meanwhile join the queue and go next: order is kept.
            while channel.queue:
                queued, channel.queue = channel.queue, []
                await stream.send(b"".join(envelope(m.SerializeToString()) for m in queued))
            channel.stream = stream
            status, _ = await stream.response()
            assert status == 200, status
            decoder = hotpath.FrameDecoder()
            while (data := await stream.read()) is not None:
                await take(request_id, decoder, data)
                if stop is not None and stop.is_set():
                    stream.reset()
                    return True
            decoder.close()
            stream.reset()  # the response ended: our side of the stream is done too
        except (StreamReset, ConnectionError):
            return False
        finally:
            channel.stream = None
        return True
