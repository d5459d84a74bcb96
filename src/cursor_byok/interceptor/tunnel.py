"""Raw byte tunnels: a CONNECT to a host we do not intercept, a WebSocket upgrade on one we do."""
from __future__ import annotations

import asyncio

from .http1 import READ_SIZE


async def pipe(
    a_reader: asyncio.StreamReader,
    a_writer: asyncio.StreamWriter,
    b_reader: asyncio.StreamReader,
    b_writer: asyncio.StreamWriter,
    *,
    idle_seconds: float,
    write_seconds: float,
) -> None:
    """Copy bytes both ways until both sides are done or the tunnel idles out (no bytes either way
    for `idle_seconds`); a side that stops reading for `write_seconds` ends it."""
    loop = asyncio.get_running_loop()
    last = [loop.time()]

    async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        while True:
            try:
                async with asyncio.timeout(idle_seconds):
                    data = await src.read(READ_SIZE)
            except TimeoutError:
                if loop.time() - last[0] < idle_seconds:
                    continue  # the other direction is alive
                raise
            if not data:
                if dst.can_write_eof():
                    dst.write_eof()  # half-close: the other direction may still talk
                    return
                raise ConnectionResetError("peer closed")
            last[0] = loop.time()
            dst.write(data)
            async with asyncio.timeout(write_seconds):
                await dst.drain()

    tasks = [asyncio.ensure_future(copy(a_reader, b_writer)), asyncio.ensure_future(copy(b_reader, a_writer))]
    try:
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if any(t.exception() is not None for t in done if not t.cancelled()):
                break
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
