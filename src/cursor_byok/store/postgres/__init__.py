"""The store on PostgreSQL (`[store] url = "postgresql://…"`, `serve --store-url`): the same `Store`,
its writer and reader threads each on a psycopg 3 connection instead of a SQLite one
(connection.py), the schema derived from the SQLite migrations (schema.py). Imported only when such
a url is configured: the local server never loads psycopg.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..migrations import Migration, stored_version
from .connection import PgConnection, connect, redacted, translate
from .schema import UntranslatableStatement, apply_migrations, derive
from .stats import database_stats

__all__ = [
    "PgConnection", "UntranslatableStatement", "connect", "database_stats", "derive", "open_connections", "redacted",
    "translate",
]


def open_connections(
    url: str, *, migrations: Sequence[Migration], read_only: bool
) -> tuple[PgConnection | None, int, PgConnection]:
    """(writer or None when `read_only`, schema version, reader), the schema migrated unless
    `read_only`. Several servers may open one database: nothing here claims it."""
    location = redacted(url)
    opened: list[PgConnection] = []
    try:
        writer = None
        if not read_only:
            writer = connect(url, application_name="cursor-byok writer")
            opened.append(writer)
            version = apply_migrations(writer, migrations, location=location)
        reader = connect(url, application_name="cursor-byok reader")
        opened.append(reader)
        if read_only:
            version = stored_version(reader, migrations, path=location)
    except BaseException:
        for conn in opened:
            conn.close()
        raise
    return writer, version, reader
