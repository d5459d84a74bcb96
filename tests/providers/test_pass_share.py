"""The streams' shared read budget per pass of the loop (`providers/pass_share.py`), on its own."""
from __future__ import annotations

import asyncio

from cursor_byok.providers.pass_share import PassShare


async def test_parts_over_a_pass_budget_go_in_later_passes_first_come_first_served_and_none_is_left_waiting() -> None:
    loop = asyncio.get_running_loop()
    share = PassShare(loop, per_pass=100)
    passes, done = [0], [False]

    def tick() -> None:
        passes[0] += 1
        if not done[0]:
            loop.call_soon(tick)

    served: list[tuple[int, str]] = []  # (pass, stream) for each part handed on

    async def stream(name: str, parts: int) -> None:
        for _ in range(parts):
            turn = share.turn(40)
            if turn is not None:
                await turn
            served.append((passes[0], name))

    tick()
    try:
        await asyncio.gather(stream("a", 4), stream("b", 4), stream("c", 4))
    finally:
        done[0] = True
    per_pass: dict[int, int] = {}
    for at, _ in served:
        per_pass[at] = per_pass.get(at, 0) + 40
    assert len(served) == 12  # every part of every stream, none left waiting
    assert max(per_pass.values()) <= 100 + 40  # the budget, and the one part that went past it
    waited = [name for _, name in served[3:]]  # after the first pass: in the order they came
    assert waited[:3] == ["a", "b", "c"], served


async def test_a_responses_first_events_go_at_once_whatever_is_left() -> None:
    share = PassShare(asyncio.get_running_loop(), per_pass=10)
    assert share.turn(50) is None
    assert share.turn(50) is not None  # over the budget: waits
    assert share.turn(50, ahead=True) is None  # a start's first text does not
