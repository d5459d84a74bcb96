"""A team server's developers in the store: added, listed, revoked, budgeted; each provider call
summed per developer; a name or token hash taken once stays taken."""
from __future__ import annotations

import pytest

from cursor_byok.store import CallRecord, DeveloperRecord, Store, WriteFailedError


def dev(name: str, digest: str, at: int = 1, **fields: object) -> DeveloperRecord:
    return DeveloperRecord(name=name, token_sha256=digest, created_at_ms=at, **fields)


async def test_developers_round_trip(store: Store) -> None:
    await store.add_developer(dev("alice", "aa" * 32, 1))
    await store.add_developer(dev("bob", "bb" * 32, 2, budget_micro_usd=5_000_000))
    await store.revoke_developer("alice", 10)
    await store.revoke_developer("alice", 20)  # once revoked, the first time stays
    await store.set_developer_budget("alice", 1)
    await store.set_developer_budget("bob", None)
    assert await store.list_developers() == [
        dev("alice", "aa" * 32, 1, revoked_at_ms=10, budget_micro_usd=1), dev("bob", "bb" * 32, 2),
    ]
    assert await store.developer("bob") == dev("bob", "bb" * 32, 2)
    assert await store.developer("carol") is None


@pytest.mark.parametrize("clash", [dev("alice", "cc" * 32), dev("carol", "aa" * 32)])
async def test_a_name_or_token_hash_is_taken_once(store: Store, clash: DeveloperRecord) -> None:
    await store.add_developer(dev("alice", "aa" * 32))
    with pytest.raises(WriteFailedError):
        await store.add_developer(clash)
    assert [d.name for d in await store.list_developers()] == ["alice"]


async def test_usage_groups_by_developer(store: Store) -> None:
    def call(seq: int, user: str | None, tokens: int, at: int = 1_000) -> CallRecord:
        return CallRecord(trace_id="t", seq=seq, model_id="m", provider="anthropic", upstream_model="u", purpose="cycle",
                          started_at_ms=at, duration_ms=1, input_tokens=tokens, user_name=user)

    for record in (call(1, "alice", 10), call(2, "bob", 20), call(3, "alice", 30), call(4, None, 40), call(5, "bob", 50, at=5)):
        store.record_call(record)
    await store.flush()
    groups = {g.group: (g.calls, g.input_tokens) for g in await store.usage_groups(since_ms=100, by_day=False, by_user=True)}
    assert groups == {"": (1, 40), "alice": (2, 40), "bob": (1, 20)}
    assert [g.group for g in await store.usage_groups(since_ms=None, by_day=False)] == [""]  # by model: one row
