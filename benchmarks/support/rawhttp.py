"""A minimal HTTP/1.1 client on raw asyncio streams for load generation: httpx costs ~1 ms of CPU
per request, which would make the load generator, not the server, the thing measured."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader = reader
        self.writer = writer
        self.host = host

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
        return cls(reader, writer, f"{host}:{port}")

    def send(self, path: str, body: bytes) -> None:
        """Write one request; read its answer with `reply()` or `chunks()`."""
        head = f"POST {path} HTTP/1.1\r\nhost: {self.host}\r\ncontent-type: application/proto\r\ncontent-length: {len(body)}\r\n\r\n"
        self.writer.write(head.encode() + body)

    async def _head(self) -> tuple[int, dict[bytes, bytes]]:
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.split(b"\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            if b":" in line:
                k, v = line.split(b":", 1)
                headers[k.strip().lower()] = v.strip()
        return status, headers

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """One request on a keep-alive connection; the whole (content-length) reply."""
        self.send(path, body)
        return await self.reply()

    async def reply(self) -> tuple[int, bytes]:
        """The status and whole (content-length) body of the next reply."""
        status, headers = await self._head()
        length = int(headers.get(b"content-length", b"0"))
        return status, await self.reader.readexactly(length) if length else b""

    async def stream(self, path: str, body: bytes) -> AsyncIterator[bytes]:
        """A streamed (chunked) reply, chunk by chunk."""
        self.send(path, body)
        async for chunk in self.chunks():
            yield chunk

    async def chunks(self) -> AsyncIterator[bytes]:
        """The next reply, which must be a 200, chunk by chunk."""
        status, headers = await self._head()
        if status != 200:
            raise RuntimeError(f"stream answered {status}")
        if headers.get(b"transfer-encoding", b"").lower() != b"chunked":
            length = int(headers.get(b"content-length", b"0"))
            yield await self.reader.readexactly(length)
            return
        while True:
            size = int((await self.reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")
                return
            data = await self.reader.readexactly(size + 2)
            yield data[:-2]

    @property
    def closed(self) -> bool:
        """The peer has closed it (e.g. a server letting an idle keep-alive connection go)."""
        return self.reader.at_eof() or self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


def take_request(buffer: bytes) -> bytes | None:
    """For the stand-in servers: what is left of `buffer` after the one complete request (head and
    Content-Length body) at its front, or None while that request is still incomplete."""
    head, sep, rest = buffer.partition(b"\r\n\r\n")
    if not sep:
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return rest[length:] if len(rest) >= length else None
