"""A psycopg 3 connection behind the part of `sqlite3.Connection`'s interface the store uses
(`execute`, `executemany`, `close`, `set_trace_callback`; and `pipeline`, which the writer uses
where the connection has it), so the writer and reader threads, the record families' SQL and the
deletions run unchanged on either backend.

The store's statements are written for SQLite; each SQL text is translated once and cached:
placeholders `?` → `%s`, a read snapshot's `BEGIN` → REPEATABLE READ, `BEGIN IMMEDIATE` → `BEGIN`,
SQLite's local-day expression → PostgreSQL's; the few statements with no common spelling (the
writer's probes over a JSON list, `rowid` reads, the schema probes) have their PostgreSQL text here
(statements.py). The driver's errors become the store's `DatabaseError` / `ConstraintViolation`.
"""
from __future__ import annotations

import contextlib
import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import psycopg
from psycopg.adapt import Loader

from ..errors import ConstraintViolation, DatabaseError
from .schema import UntranslatableStatement
from .statements import OVERRIDES

__all__ = ["PgConnection", "connect", "redacted", "translate"]

_LITERAL = re.compile(r"('[^']*')")
_INSERT_OR_IGNORE = re.compile(r"^(\s*)INSERT OR IGNORE INTO (.*?);?\s*$", re.S)
# SQLite spellings PostgreSQL does not know: a statement using one needs a text in statements.py.
_SQLITE_ONLY = re.compile(
    r"\b(INSERT OR REPLACE|REPLACE INTO|json_each|json_extract|rowid|sqlite_master|strftime|julianday|unixepoch|GLOB|PRAGMA)\b"
    r"|LIMIT -1\b",
    re.I,
)
_LOCAL_DAY = re.compile(r"date\((\w+) / 1000, 'unixepoch', 'localtime'\)")
_BEGINS = {"BEGIN": "BEGIN ISOLATION LEVEL REPEATABLE READ", "BEGIN IMMEDIATE": "BEGIN"}


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> str:
    """The PostgreSQL text of one of the store's SQLite statements."""
    override = OVERRIDES.get(sql)
    if override is not None:
        return override
    begin = _BEGINS.get(sql.strip())
    if begin is not None:
        return begin
    parts = _LITERAL.split(sql.replace("%", "%%"))  # psycopg reads % inside literals too
    for i in range(0, len(parts), 2):  # placeholders: outside string literals
        parts[i] = parts[i].replace("?", "%s")
    text = _LOCAL_DAY.sub(r"to_char(to_timestamp(\1 / 1000), 'YYYY-MM-DD')", "".join(parts))
    text = _INSERT_OR_IGNORE.sub(r"\1INSERT INTO \2 ON CONFLICT DO NOTHING", text)
    if (found := _SQLITE_ONLY.search("".join(_LITERAL.split(text)[::2]))) is not None:
        raise UntranslatableStatement(f"{found.group(0)!r} is SQLite's (give its PostgreSQL text in statements.py): {sql.strip()}")
    return text


class _NumberLoader(Loader):
    """numeric → int when whole (SUM of integers), else float (AVG): what SQLite's sums give."""

    def load(self, data: Any) -> int | float:
        text = bytes(data)
        try:
            return int(text)
        except ValueError:
            return float(text)


def _wrapped(exc: psycopg.Error) -> DatabaseError:
    kind = ConstraintViolation if isinstance(exc, psycopg.IntegrityError) else DatabaseError
    return kind(f"{type(exc).__name__}: {exc}")


class PgConnection:
    """One autocommit psycopg connection, used by one thread at a time (as the store's are). A
    connection the database or the network broke is opened again at its next statement: the
    transaction it was in failed (its writes' futures say so), the ones after it go through."""

    def __init__(self, url: str, application_name: str) -> None:
        self._url = url
        self._application_name = application_name
        self._conn = _open(url, application_name)
        self._trace: Callable[[str], None] | None = None

    def _live(self) -> psycopg.Connection[Any]:
        if self._conn.broken:
            self._conn = _open(self._url, self._application_name)
        return self._conn

    def set_trace_callback(self, trace: Callable[[str], None] | None) -> None:
        self._trace = trace

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        text = translate(sql)
        if self._trace is not None:
            self._trace(text)
        try:
            return self._live().execute(text, params)  # type: ignore[arg-type]
        except psycopg.Error as exc:
            raise _wrapped(exc) from exc

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        text = translate(sql)
        if self._trace is not None:
            self._trace(text)
        try:
            with self._live().cursor() as cursor:
                cursor.executemany(text, rows)  # type: ignore[arg-type]
        except psycopg.Error as exc:
            raise _wrapped(exc) from exc

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[None]:
        """Statements sent without waiting for each one's answer until a result is read or the
        block ends (where a failed one's error is raised)."""
        try:
            with self._live().pipeline():
                yield
        except psycopg.Error as exc:
            raise _wrapped(exc) from exc

    def close(self) -> None:
        self._conn.close()


def connect(url: str, *, application_name: str) -> PgConnection:
    return PgConnection(url, application_name)


def _open(url: str, application_name: str) -> psycopg.Connection[Any]:
    """An autocommit connection whose local day is this process's (SQLite's 'localtime') and whose
    COMMIT returns once the commit is durable (a database set to `synchronous_commit = off` would
    let a crash of PostgreSQL lose what the IDE was told; a stricter setting is kept)."""
    try:
        conn = psycopg.connect(url, autocommit=True, application_name=application_name)
        conn.adapters.register_loader("numeric", _NumberLoader)
        offset = time.localtime().tm_gmtoff
        sign = "-" if offset < 0 else "+"
        conn.execute(
            f"SET TIME ZONE INTERVAL '{sign}{abs(offset) // 3600:02d}:{abs(offset) % 3600 // 60:02d}' HOUR TO MINUTE; "
            "SELECT set_config('synchronous_commit', 'on', false) WHERE current_setting('synchronous_commit') = 'off'"
        )
    except psycopg.Error as exc:
        raise _wrapped(exc) from exc
    return conn


def redacted(url: str) -> str:
    """The url without its password, for messages and logs."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)
