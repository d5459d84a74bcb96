"""Each of the store's connections keeps a small page cache: the writer appends at the end of the
B-trees and the reader reads a conversation once per reload, so 512 KiB each holds what they touch
again (the default 2 MiB each only filled up with pages read once, and stayed resident)."""
from __future__ import annotations

from pathlib import Path

from cursor_byok.store.connection import PAGE_CACHE_KIB, connect
from cursor_byok.store.records import Synchronous


def test_each_connection_keeps_a_small_page_cache(tmp_path: Path) -> None:
    for read_only in (False, True):
        conn = connect(tmp_path / "state.db", synchronous=Synchronous.NORMAL, busy_timeout_ms=100, read_only=read_only)
        try:
            assert conn.execute("PRAGMA cache_size").fetchone()[0] == -PAGE_CACHE_KIB == -512
        finally:
            conn.close()
