"""`db stats` of a PostgreSQL store: its size as the server counts it, and the same row counts and
quarantined streams as the embedded store's (upkeep.py). Page figures are PostgreSQL's business
(autovacuum): reported as none free."""
from __future__ import annotations

import contextlib

from ..inbound import select_quarantined
from ..upkeep import COUNTED, DatabaseStats
from .connection import connect, redacted


def database_stats(url: str, *, table_sizes: bool = False) -> DatabaseStats:
    with contextlib.closing(connect(url, application_name="cursor-byok db stats")) as conn:
        conn.execute("BEGIN")  # one snapshot for every figure
        size, block = conn.execute("SELECT pg_database_size(current_database()), current_setting('block_size')::int").fetchone()
        stats = DatabaseStats(path=redacted(url), file_bytes=size, wal_bytes=0, page_size=block, pages=size // block, free_pages=0)
        present = [t for t in COUNTED if conn.execute("SELECT to_regclass(?) IS NOT NULL", (t,)).fetchone()[0]]
        stats.rows = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in present}
        stats.quarantined = select_quarantined(conn)
        if table_sizes:
            stats.table_bytes = {t: conn.execute("SELECT pg_total_relation_size(?::regclass)", (t,)).fetchone()[0] for t in present}
        conn.execute("COMMIT")
    return stats
