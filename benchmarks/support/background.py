"""The turn-start benchmark's background streams, in a process of their own: conversations taking
turns back to back on one server, so that the benchmark's probe turns are timed on an event loop
that is not also reading thousands of other deltas a second.

    python -m benchmarks.support.background PORT PROVIDER_PORT frames|relay MODEL COUNT

`frames`: the server speaks RunSSE frames (ours, the floor); `relay`: it relays the provider's SSE
bytes (the bare app). It prints `streaming` once every conversation has its first text, then
answers lines on stdin: `words` → the words of answer text read so far; `stop` → the stamp
provider ends the answers in progress, each conversation its turn, then `stopped`.
"""
from __future__ import annotations

import asyncio
import sys
import time

import uvloop

from benchmarks.test_turn_start import TURNS, Client, provider_control

STAMP = b'"content":"'


class RelayClient(Client):
    """A conversation on the bare app, whose RunSSE carries the provider's SSE bytes unchanged."""

    async def read(self, rid: str, sent: int) -> tuple[int, int]:
        result: tuple[int, int] | None = None
        seen = b""  # the answer until its stamp is whole; then the last bytes (a word may straddle chunks)
        async for chunk in self.streamer.chunks():
            now = time.monotonic_ns()
            before = seen.count(b"word")
            seen += chunk
            self.words += seen.count(b"word") - before
            if result is None and (at := seen.find(STAMP)) >= 0 and (end := seen.find(b"|", at)) >= 0:
                result = (int(seen[at + len(STAMP):end]) - sent, now - sent)
                self.texted.set()
            if result is not None:
                seen = seen[-3:]
        assert result is not None, "the turn ended without text"
        return result


CLIENTS: dict[str, type[Client]] = {"frames": Client, "relay": RelayClient}


class Background:
    """`count` conversations, each taking turns back to back on `model` (a new conversation every
    TURNS turns) until stopped."""

    def __init__(self, port: int, client: type[Client], model: str, count: int) -> None:
        self.port, self.client, self.model, self.count = port, client, model, count
        self.conversations: list[Client] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.stopping = False

    def words(self) -> int:
        return sum(c.words for c in self.conversations)

    async def start(self) -> None:
        """Start them all; returns once each has streamed its first text."""
        firsts = [await self.client(self.port, self.model).open() for _ in range(self.count)]
        self.tasks = [asyncio.ensure_future(self._loop(first)) for first in firsts]
        await asyncio.gather(*(first.texted.wait() for first in firsts))

    async def _loop(self, conversation: Client) -> None:
        while True:
            self.conversations.append(conversation)
            for _ in range(TURNS):
                await conversation.turn()
                if self.stopping:
                    conversation.close()
                    return
            conversation.close()
            conversation = await self.client(self.port, self.model).open()

    async def stop(self, provider_port: int) -> None:
        """No more turns; the provider ends the answers in progress; each turn ends as usual."""
        self.stopping = True
        await provider_control(provider_port, "finish")
        await asyncio.gather(*self.tasks)


async def main(port: int, provider_port: int, client: str, model: str, count: int) -> None:
    background = Background(port, CLIENTS[client], model, count)
    await background.start()
    print("streaming", flush=True)
    loop = asyncio.get_running_loop()
    while command := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
        if command == "words":
            print(background.words(), flush=True)
        else:
            await background.stop(provider_port)
            print("stopped", flush=True)
            return


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])))
