"""DirectSend: the writer-side send a caught-up RunSSE reader lends its stream. Granian's send
finishes at once; these cover an ASGI send that suspends, where order must still hold."""
from __future__ import annotations

import asyncio
from typing import Any

from cursor_byok.conversation import OutputHub
from cursor_byok.gateway.stream import DirectSend


class SlowServer:
    """An ASGI `send` that suspends on every body chunk until released, recording arrival order."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.gate = asyncio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        await self.gate.wait()
        self.received.append(message["body"])


async def test_a_send_that_suspends_is_finished_before_the_reader_sends_more() -> None:
    server = SlowServer()
    direct = DirectSend(server.send)
    stream = OutputHub().open("r1")
    reader = asyncio.ensure_future(stream.read(0, direct))
    await asyncio.sleep(0)
    stream.write(b"a")  # the push starts a send that suspends: handed to a task
    stream.write(b"b")  # the push declines while that send is in flight: the reader wakes
    result = await reader
    assert result.data == b"b"
    server.gate.set()
    await direct.settle()  # what the RunSSE loop does before sending `result.data` itself
    await server.send({"body": result.data})
    assert server.received == [b"a", b"b"]


async def test_an_immediate_send_completes_inside_the_call() -> None:
    server = SlowServer()
    server.gate.set()

    class Immediate:
        def __await__(self):  # type: ignore[no-untyped-def]
            server.received.append(b"now")
            return iter(())

    direct = DirectSend(lambda message: Immediate())
    assert direct(b"x", True) is True
    assert server.received == [b"now"]
    await direct.settle()


async def test_a_send_that_raises_declines_instead_of_failing_the_writer() -> None:
    def broken(message: dict[str, Any]) -> Any:
        raise RuntimeError("connection gone")

    assert DirectSend(broken)(b"x", True) is False
