"""A stand-in for api2.cursor.sh in the passthrough benchmark: a keep-alive HTTP/1.1 server that
answers every request with the same small protobuf-sized body, as cheaply as it can.

    python -m benchmarks.support.origin PORT
"""
from __future__ import annotations

import asyncio
import sys

import uvloop

from benchmarks.support.rawhttp import take_request

BODY = b"\x0a\x10" + b"o" * 200
REPLY = b"HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\ncontent-length: %d\r\n\r\n%s" % (len(BODY), BODY)


class _Origin(asyncio.Protocol):
    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (rest := take_request(self.buffer)) is not None:
            self.buffer = rest
            assert self.transport is not None
            self.transport.write(REPLY)


async def main(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(_Origin, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1])))
