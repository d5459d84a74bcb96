"""Conversation leases on a real PostgreSQL database: one owner at a time, taken over only once the
owner's lease has ended, let go only by its owner."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from cursor_byok.cluster.leases import Claim, Leases
from cursor_byok.store import Store


@pytest.fixture
async def url(postgres_url: str) -> AsyncIterator[str]:
    store = await Store.open(postgres_url)  # the schema, migrations applied
    await store.close()
    yield postgres_url


@pytest.fixture
async def pair(url: str) -> AsyncIterator[tuple[Leases, Leases]]:
    conns = [await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(2)]
    try:
        yield Leases(conns[0], "inst-a", 60.0), Leases(conns[1], "inst-b", 60.0)
    finally:
        for conn in conns:
            await conn.close()


async def test_one_owner_at_a_time(pair: tuple[Leases, Leases]) -> None:
    a, b = pair
    assert await a.claim("conv-1") == Claim("inst-a")
    assert await b.claim("conv-1") == Claim("inst-a")  # held, and not ended: b learns the owner
    assert await a.claim("conv-1") == Claim("inst-a")  # the owner's claim renews it
    assert await a.holds("conv-1", "inst-a") and not await b.holds("conv-1", "inst-b")


async def test_a_released_lease_is_claimed_without_a_takeover(pair: tuple[Leases, Leases]) -> None:
    a, b = pair
    await a.claim("conv-1")
    await b.release("conv-1")  # not b's to let go
    assert await b.claim("conv-1") == Claim("inst-a")
    await a.release("conv-1")
    assert await b.claim("conv-1") == Claim("inst-b")  # nothing to take over: a let it go idle


async def test_an_ended_lease_is_taken_over_and_says_from_whom(pair: tuple[Leases, Leases]) -> None:
    a, b = pair
    await a.claim("conv-1")
    await a.claim("conv-2")
    await a.expire_all()  # as a stopping instance does; a killed one's end the same way, later
    assert await b.claim("conv-1") == Claim("inst-b", taken_from="inst-a")
    assert await a.claim("conv-1") == Claim("inst-b")
    assert await a.renew() == 1  # conv-2 only: conv-1 is b's now


async def test_concurrent_claims_have_one_winner(url: str) -> None:
    conns = [await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(6)]
    try:
        claimers = [Leases(conn, f"inst-{n}", 60.0) for n, conn in enumerate(conns)]
        for round_ in range(20):
            claims = await asyncio.gather(*(c.claim(f"conv-{round_}") for c in claimers))
            assert len({claim.owner for claim in claims}) == 1
            assert sum(claim.owner == c.me for claim, c in zip(claims, claimers)) == 1
    finally:
        for conn in conns:
            await conn.close()
