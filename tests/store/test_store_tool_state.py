"""A conversation's tool state (todo list, background-shell output offsets): one opaque row per
conversation, replaced whole, kept across restarts."""
from __future__ import annotations

import pytest

from cursor_byok.store import Store, WriteFailedError


async def test_tool_state_is_replaced_whole_and_survives_a_restart(store_location, conversation) -> None:
    store = await Store.open(store_location)
    assert await store.get_tool_state("c") is None
    store.upsert_conversation(conversation("c"))
    store.put_tool_state("c", b"first")
    await store.put_tool_state("c", b"second")
    assert await store.get_tool_state("c") == b"second"
    await store.close()
    store = await Store.open(store_location)
    try:
        assert await store.get_tool_state("c") == b"second"
        assert await store.get_tool_state("other") is None
    finally:
        await store.close()


async def test_tool_state_needs_its_conversation(store: Store) -> None:
    with pytest.raises(WriteFailedError):
        await store.put_tool_state("nobody", b"state")
    with pytest.raises(TypeError):
        store.put_tool_state("c", "not bytes")  # type: ignore[arg-type]
