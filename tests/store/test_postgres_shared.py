"""Several servers may open one PostgreSQL database. A store's seq counters are a cache of what it
wrote last: when another store appended to the same conversation meanwhile, the insert of a taken
seq is refused by the database (a unique violation, never two events with one seq), the counters
are read again and the write goes through with the next free seqs."""
from __future__ import annotations

from cursor_byok.store import ConversationRecord, NewEvent, Store


def _events(prefix: str, n: int) -> list[NewEvent]:
    return [NewEvent(f"{prefix}{i}", "user", prefix.encode()) for i in range(n)]


async def test_two_stores_appending_to_one_conversation_keep_its_seqs_gap_free(postgres_url: str) -> None:
    one, two = await Store.open(postgres_url), await Store.open(postgres_url)
    try:
        one.upsert_conversation(ConversationRecord("c", 1, 1))
        first = await one.append_events("c", _events("a", 2))  # one caches seq 2
        second = await two.append_events("c", _events("b", 3))  # two reads 2, writes 3..5
        third = await one.append_events("c", _events("c", 2))  # one's cache says 2: 3 is taken
        checkpoint = await one.put_checkpoint("c", b"s", kind="final")
        again = await two.put_checkpoint("c", b"t", kind="final")  # two never saw checkpoint 1
        stored = await two.load_events("c")
    finally:
        await one.close()
        await two.close()
    assert [r.seq for r in first.results] == [1, 2]
    assert [r.seq for r in second.results] == [3, 4, 5]
    assert [r.seq for r in third.results] == [6, 7]
    assert [e.seq for e in stored] == list(range(1, 8))
    assert [e.event_id for e in stored] == ["a0", "a1", "b0", "b1", "b2", "c0", "c1"]
    assert (checkpoint.seq, again.seq) == (1, 2) and again.through_event_seq == 7


async def test_a_second_opener_is_not_refused(postgres_url: str) -> None:
    """SQLite's one owner per data dir is that backend's rule; on PostgreSQL the cluster decides
    who writes a conversation (a lease), not the store."""
    one = await Store.open(postgres_url)
    two = await Store.open(postgres_url)
    try:
        one.upsert_conversation(ConversationRecord("c", 1, 1))
        await one.flush()
        assert (await two.get_conversation("c")) is not None
    finally:
        await one.close()
        await two.close()


async def test_a_connection_the_database_dropped_is_opened_again(postgres_url: str) -> None:
    """The database restarted, or a network hiccup: the writes after it go through (and so do reads)."""
    import psycopg

    store = await Store.open(postgres_url)
    try:
        store.upsert_conversation(ConversationRecord("c", 1, 1))
        await store.append_events("c", _events("a", 1))
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        try:  # the first use of each dead connection fails: it is how the store learns
            await store.append_events("c", _events("b", 1))
        except Exception:  # noqa: BLE001 - either way, what follows must go through
            pass
        try:
            await store.load_events("c")
        except Exception:  # noqa: BLE001
            pass
        appended = await store.append_events("c", _events("c", 1))
        stored = [e.event_id for e in await store.load_events("c")]
    finally:
        await store.close()
    assert appended.results[0].duplicate is False
    assert stored[0] == "a0" and stored[-1] == "c0"


async def test_a_commit_is_durable_even_where_the_database_lets_commits_be_lazy(postgres_url: str) -> None:
    """A database (or role) set to synchronous_commit = off: the store's connections wait for the
    commit's flush all the same, as its futures promise."""
    import psycopg

    from cursor_byok.store.postgres import connect

    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{admin.info.dbname}" SET synchronous_commit = off')
    conn = connect(postgres_url, application_name="test")
    try:
        assert conn.execute("SHOW synchronous_commit").fetchall() == [("on",)]
    finally:
        conn.close()


async def test_a_checkpoint_counts_the_events_another_store_appended_meanwhile(postgres_url: str) -> None:
    """The conversation's writer moved to another server and back: a checkpoint taken then claims
    every event stored, not the last one this store wrote (its state was loaded with them all)."""
    one, two = await Store.open(postgres_url), await Store.open(postgres_url)
    try:
        one.upsert_conversation(ConversationRecord("c", 1, 1))
        await one.append_events("c", _events("a", 2))
        await two.append_events("c", _events("b", 3))
        checkpoint = await one.put_checkpoint("c", b"state through 5", kind="final")
    finally:
        await one.close()
        await two.close()
    assert checkpoint.through_event_seq == 5
