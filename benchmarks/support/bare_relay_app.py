"""The bare granian app of the turn-start benchmark: on a BidiAppend carrying a run request it POSTs
the prebuilt provider request (as the floor, `bare_turn_app`, does) and relays the provider's answer
to that request id's RunSSE unchanged, byte for byte: no SSE decode, no frames. What any server
that puts a provider stream on an HTTP response pays; a new turn's time to first token on it, while
other conversations stream, is the target's yardstick ("the bare app" of issue 35).
"""
from __future__ import annotations

import asyncio

from benchmarks.support.bare_turn_app import BODY, session, turn_app


async def _relay(queue: asyncio.Queue[bytes | None], url: str) -> None:
    try:
        response = await session().post(url, data=BODY, headers={"content-type": "application/json"})
        try:
            while chunk := await response.content.readany():
                queue.put_nowait(chunk)
        finally:
            response.release()
    finally:
        queue.put_nowait(None)


app = turn_app(_relay, [(b"content-type", b"text/event-stream")], b"")
