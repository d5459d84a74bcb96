"""The dashboard's conversation pages against a real store: following `next` visits each
conversation once, newest activity first; a cursor the API did not give out is refused."""
from __future__ import annotations

from pathlib import Path

import pytest

from cursor_byok.observability import views
from cursor_byok.store import ConversationRecord, Store


async def test_following_next_visits_each_conversation_once(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "state.db")
    try:
        for i in range(5):
            store.upsert_conversation(ConversationRecord(f"c{i}", created_at_ms=i, updated_at_ms=100 + i // 2, model_id="m"))
        await store.flush()
        seen, cursor = [], None
        while True:
            page = await views.conversations(store, cursor=cursor, limit=2)
            seen += [item["conversation_id"] for item in page["items"]]
            if (cursor := page["next"]) is None:
                break
        whole = await views.conversations(store, cursor=None, limit=views.MAX_PAGE)
    finally:
        await store.close()
    assert seen == [item["conversation_id"] for item in whole["items"]] == ["c4", "c2", "c3", "c0", "c1"]
    assert whole["next"] is None


@pytest.mark.parametrize("cursor", ["garbage", "12", ".c1", "x.c1"])
def test_a_cursor_the_api_did_not_give_out_is_refused(cursor: str) -> None:
    with pytest.raises(ValueError, match="cursor: not one this API gave out"):
        views.decode_cursor(cursor)
