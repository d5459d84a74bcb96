"""The inbound journal: appends recorded once per (request id, generation, seqno), read back per
generation in arrival order, settled in the middle and forgotten whole."""
from __future__ import annotations

from cursor_byok.store import InboundAppend, InboundStream, Store


async def test_appends_are_recorded_once_and_read_back_per_generation_in_arrival_order(store_location) -> None:
    store = await Store.open(store_location)
    store.record_append("r2", "run-b", 0, b"zero-b")
    store.record_append("r1", "run-a", 1, b"one")
    store.record_append("r1", "run-a", 0, b"zero")
    store.record_append("r1", "run-a", 1, b"one again")  # a resend: the first copy stays
    store.record_append("r1", "run-c", 0, b"zero-c")  # a later generation of the same request id
    await store.record_append("r3", "", 0, b"no run id")
    await store.close()
    store = await Store.open(store_location)  # it is all durable
    try:
        assert await store.inbound_streams() == [
            InboundStream("r2", "run-b", [InboundAppend(0, b"zero-b")]),
            InboundStream("r1", "run-a", [InboundAppend(0, b"zero"), InboundAppend(1, b"one")]),
            InboundStream("r1", "run-c", [InboundAppend(0, b"zero-c")]),
            InboundStream("r3", "", [InboundAppend(0, b"no run id")]),
        ]
    finally:
        await store.close()


async def test_settling_keeps_the_run_request_and_where_the_stream_stood(store: Store) -> None:
    for seqno in range(6):
        store.record_append("r", "g", seqno, f"m{seqno}".encode())
    store.record_append("other", "g", 0, b"x")
    await store.settle_appends("r", "g", 3)
    assert (await store.inbound_streams())[0] == InboundStream(
        "r", "g", [InboundAppend(0, b"m0"), InboundAppend(3, None), InboundAppend(4, b"m4"), InboundAppend(5, b"m5")]
    )
    await store.settle_appends("r", "g", 5)
    assert (await store.inbound_streams())[0].appends == [InboundAppend(0, b"m0"), InboundAppend(5, None)]


async def test_a_finished_generation_is_forgotten_whole(store: Store) -> None:
    for seqno in range(3):
        store.record_append("r", "g1", seqno, b"m")
    store.record_append("r", "g2", 0, b"n")
    await store.forget_appends("r", "g1")
    assert await store.inbound_streams() == [InboundStream("r", "g2", [InboundAppend(0, b"n")])]


async def test_the_settle_mark_is_kept_even_for_a_row_never_journaled(store: Store) -> None:
    """A Run stream's message whose journal write failed was still applied; once the run settles
    through it, a restart must start after it, not wait behind a gap for a row that never comes."""
    for seqno in (0, 1, 2, 4):  # 3: its write failed
        store.record_append("r", "g", seqno, f"m{seqno}".encode())
    await store.settle_appends("r", "g", 3)
    assert (await store.inbound_streams())[0].appends == [InboundAppend(0, b"m0"), InboundAppend(3, None), InboundAppend(4, b"m4")]


async def test_a_quarantined_generation_leaves_the_journal_and_is_listed(store: Store, store_location) -> None:
    from cursor_byok.store import database_stats

    for seqno in range(3):
        store.record_append("r", "g", seqno, b"m")
    store.record_append("r", "g2", 0, b"n")
    await store.quarantine_appends("r", "g", "conv-1", "KeyError: 'x'")
    assert await store.inbound_streams() == [InboundStream("r", "g2", [InboundAppend(0, b"n")])]
    [listed] = database_stats(store_location).quarantined
    assert (listed.conversation_id, listed.request_id, listed.appends, listed.reason) == ("conv-1", "r", 3, "KeyError: 'x'")
