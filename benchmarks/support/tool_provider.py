"""An OpenAI-compatible endpoint that answers every request with one Read tool call, until the
configured number of requests, then with a short text: a model that does nothing but call tools.

    python -m benchmarks.support.tool_provider PORT ROUNDS PATH
"""
from __future__ import annotations

import asyncio
import json
import sys


def sse(obj: dict) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


def reply(n: int, rounds: int, path: str) -> bytes:
    if n < rounds:
        call = {"index": 0, "id": f"call_{n}", "type": "function", "function": {"name": "Read", "arguments": json.dumps({"path": path})}}
        events = [sse({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}),
                  sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})]
    else:
        events = [sse({"choices": [{"index": 0, "delta": {"content": "done"}, "finish_reason": None}]}),
                  sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})]
    return b"".join(events) + b"data: [DONE]\n\n"


async def main(port: int, rounds: int, path: str) -> None:
    served = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        head = await reader.readuntil(b"\r\n\r\n")
        if head.startswith(b"HEAD "):  # the server warming its connection: not a model request
            writer.write(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        length = next((int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")), 0)
        await reader.readexactly(length)
        body = reply(served, rounds, path)
        served += 1
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]))
