"""A tiny OpenAI-compatible streaming endpoint whose every text chunk carries the moment it was sent
(time.monotonic_ns, one clock for every process on the machine), for latency benchmarks.

    python -m benchmarks.support.ts_provider PORT FRAMES INTERVAL_MS
"""
from __future__ import annotations

import asyncio
import json
import sys
import time


def chunk(text: str) -> bytes:
    data = json.dumps({"id": "b", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})
    event = f"data: {data}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(event), event)


TAIL = (
    b'data: {"id":"b","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b'data: {"id":"b","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":500,"total_tokens":510}}\n\n'
    b"data: [DONE]\n\n"
)


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frames: int, interval: float) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
    for _ in range(frames):
        writer.write(chunk(f"{time.monotonic_ns()}|"))
        await writer.drain()
        await asyncio.sleep(interval)
    writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(TAIL), TAIL))
    await writer.drain()
    writer.close()


async def main(port: int, frames: int, interval_ms: float) -> None:
    server = await asyncio.start_server(lambda r, w: handle(r, w, frames, interval_ms / 1000), "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
