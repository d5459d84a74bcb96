"""Team access over a real store: who a token is, what each developer spent this month, and
whether their next turn may start."""
from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cursor_byok.config import Config, parse
from cursor_byok.store import CallRecord, DeveloperRecord, Store
from cursor_byok.team import TeamAccess, micro_usd, month_start_ms, new_token, token_digest

MODEL = {"id": "m", "provider": "anthropic", "model": "claude", "price": {"input": 3.0, "output": 15.0}}


def config(budget: float = 1.0) -> Config:
    return parse({"team": {"enabled": True, "monthly_budget_usd": budget}, "models": [MODEL]})


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(tmp_path / "state.db")
    try:
        yield opened
    finally:
        await opened.close()


def spend(store: Store, user: str, input_tokens: int, at_ms: int, seq: int) -> None:
    store.record_call(CallRecord(trace_id="t", seq=seq, model_id="m", provider="anthropic", upstream_model="claude",
                                 purpose="cycle", started_at_ms=at_ms, duration_ms=1, input_tokens=input_tokens, user_name=user))


def test_month_start_is_the_first_of_the_month_utc() -> None:
    now = dt.datetime(2026, 3, 17, 13, 5, tzinfo=dt.timezone.utc)
    assert month_start_ms(now) == int(dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)


def test_tokens_are_256_bits_and_kept_as_their_sha256() -> None:
    token = new_token()
    assert len(token) == 43 and token != new_token()
    assert len(token_digest(token.encode())) == 64


async def test_tokens_identify_developers_until_revoked(store: Store) -> None:
    alice, bob = new_token(), new_token()
    await store.add_developer(DeveloperRecord(name="alice", token_sha256=token_digest(alice.encode()), created_at_ms=1))
    await store.add_developer(DeveloperRecord(name="bob", token_sha256=token_digest(bob.encode()), created_at_ms=2, revoked_at_ms=3))
    team = TeamAccess(config(), store)
    await team.refresh()
    found = team.identify(alice.encode())
    assert found is not None and found.name == "alice"
    assert team.identify(bob.encode()) is None and team.identify(b"x" * 43) is None

    await store.revoke_developer("alice", 4)
    assert team.identify(alice.encode()) is not None  # until the next reread
    await team.refresh()
    assert team.identify(alice.encode()) is None


async def test_a_turn_past_the_budget_is_refused_and_only_this_months_calls_count(store: Store) -> None:
    month = month_start_ms()
    await store.add_developer(DeveloperRecord(name="own", token_sha256="a" * 64, created_at_ms=1, budget_micro_usd=micro_usd(0.5)))
    await store.add_developer(DeveloperRecord(name="free", token_sha256="b" * 64, created_at_ms=1, budget_micro_usd=0))
    spend(store, "own", 200_000, month + 1, 1)  # $0.60: past its own $0.50
    spend(store, "dflt", 200_000, month + 1, 2)  # $0.60: under the $1 default
    spend(store, "dflt", 1_000_000, month - 1, 3)  # last month's: not counted
    spend(store, "free", 10_000_000, month + 1, 4)  # no limit
    await store.flush()
    team = TeamAccess(config(), store)
    await team.refresh()
    refused = team.over_budget("own")
    assert refused is not None and refused.code == "resource_exhausted" and "own" in refused.message and "$0.5000" in refused.message
    assert team.over_budget("dflt") is None and team.over_budget("free") is None and team.over_budget(None) is None

    team.spent("dflt", 0.40)  # a call just ended: counted before the next reread
    assert team.over_budget("dflt") is not None
    assert TeamAccess(config(budget=0.0), store).over_budget("dflt") is None  # a default of 0: no limit


async def test_an_unknown_token_rereads_at_most_once_in_a_while(store: Store) -> None:
    team = TeamAccess(config(), store)
    assert await team.learn() is True
    assert await team.learn() is False  # a moment later: the last reread stands
