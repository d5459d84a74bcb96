"""Costs that must not grow with the history the database holds (issue 18), checked at small scale;
`benchmarks/test_scale.py` measures them on a year of heavy use.

- Every SQL statement the store runs from start-up through turns (new conversations, a tool round
  trip, an old conversation continued after a restart, an old request id routed again), and in a
  retention pass, is recorded as SQLite runs it, and its query plan (`EXPLAIN QUERY PLAN`, and the
  plans of the triggers its writes fire) must not scan a table that grows with conversations, runs
  or events.
- Opening the store and restoring the service over a database of many past turns holds no more
  Python memory than over an empty one.
- What a turn adds to the stored checkpoints late in a conversation is what it adds early.
"""
from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
import tracemalloc
import uuid
from pathlib import Path

import pytest

from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.store import Store, stored_ids
from tests.conversation.test_tool_state import call
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import run_request
from tests.harness.inprocess import MODEL, Rig
from tests.harness.stored_ids import snapshots_taken
from tests.harness.synthetic_history import build

# Tables whose size is fixed by the schema or that are empty outside one transaction.
BOUNDED_TABLES = {"schema_version", "sqlite_master", "sqlite_schema", "conversation_deletions"}
_NOT_QUERIES = re.compile(r"\s*(PRAGMA|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)\b", re.IGNORECASE)
_WRITTEN = re.compile(r"\s*(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|UPDATE|DELETE\s+FROM)\s+(\w+)", re.IGNORECASE)
_SCAN = re.compile(r"SCAN (\w+)(?: USING (?:COVERING )?INDEX (\w+))?")


class Schema:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
        self.tables = {name for kind, name, _, _ in rows if kind == "table"}
        self.partial_indexes = {name for kind, name, _, sql in rows if kind == "index" and sql and " WHERE " in sql.upper()}
        self.triggers: dict[str, list[str]] = {}
        for kind, name, table, sql in rows:
            if kind == "trigger":
                self.triggers.setdefault(table, []).append(sql)

    def growing_scans(self, sql: str) -> list[str]:
        """The plan lines of `sql` that read a whole table (or a whole index of it) that grows."""
        found = []
        for *_, detail in self.conn.execute(f"EXPLAIN QUERY PLAN {sql}"):
            m = _SCAN.match(detail)
            if m is None:
                continue
            table, index = m.groups()
            if table in self.tables and table not in BOUNDED_TABLES and index not in self.partial_indexes:
                found.append(detail)
        return found

    def trigger_queries(self, table: str) -> list[str]:
        """The queries the triggers on `table` run (their WHEN and body), NEW/OLD as constants."""
        out = []
        for sql in self.triggers.get(table, []):
            sql = re.sub(r"\b(?:NEW|OLD)\.\w+", "'x'", sql)
            sql = re.sub(r"\bRAISE\s*\([^)]*\)", "NULL", sql)  # only a trigger may raise
            when = re.search(r"\bWHEN\b(.*)\bBEGIN\b", sql, re.IGNORECASE | re.DOTALL)
            if when:
                out.append(f"SELECT {when.group(1)}")
            body = re.search(r"\bBEGIN\b(.*)\bEND\s*$", sql, re.IGNORECASE | re.DOTALL)
            assert body is not None, sql
            out += [s for s in (part.strip() for part in body.group(1).split(";")) if s]
        return out


def growing_scans(database: Path, statements: list[str]) -> dict[str, list[str]]:
    """statement → its plan lines that scan a growing table, for every statement (and every
    trigger query the writes among them fire) that has one."""
    with contextlib.closing(sqlite3.connect(database)) as conn:
        schema = Schema(conn)
        queries = dict.fromkeys(s for s in statements if not _NOT_QUERIES.match(s))
        for statement in list(queries):
            written = _WRITTEN.match(statement)
            if written:
                queries.update(dict.fromkeys(schema.trigger_queries(written.group(1))))
        return {q[:300]: scans for q in queries if (scans := schema.growing_scans(q))}


async def test_every_statement_from_start_up_through_turns_is_bounded(tmp_path: Path, provider: FakeProviderServer) -> None:
    statements: list[str] = []
    rig = await Rig(tmp_path, provider, store_options={"trace": statements.append}).start()
    try:
        ide = rig.ide(tmp_path)
        conv, old_rid = uuid.uuid4().hex, uuid.uuid4().hex
        (tmp_path / "notes.txt").write_text("a note\n")
        provider.enqueue(
            OPENAI_CHAT.tool_calls([call("c1", "Read", path=str(tmp_path / "notes.txt"))]),
            OPENAI_CHAT.text(["read it"]),
            OPENAI_CHAT.text(["a second conversation"]),
            OPENAI_CHAT.text(["continued after the restart"]),
            OPENAI_CHAT.text(["routed by the old request id"]),
        )
        log = await ide.turn(run_request("read the notes", model=MODEL, conversation_id=conv, workspace=str(tmp_path)),
                             request_id=old_rid)
        assert log.text == "read it"
        assert (await ide.turn(run_request("another", model=MODEL, conversation_id=uuid.uuid4().hex))).terminal is None
        await rig.restart()
        ide = rig.ide(tmp_path)
        assert (await ide.turn(run_request("go on", model=MODEL, conversation_id=conv))).text == "continued after the restart"
        routed = await ide.turn(run_request("again", model=MODEL, conversation_id=None), request_id=old_rid)
        assert routed.text == "routed by the old request id"
        assert rig.store is not None
        await rig.store.flush()
    finally:
        await rig.close()
    assert any("request_bindings" in s for s in statements) and any("history_events" in s for s in statements)
    assert growing_scans(rig.path, statements) == {}


def test_the_check_finds_a_full_table_read(tmp_path: Path) -> None:
    database = tmp_path / "state.db"
    build(database, 2, 1, 2)
    found = growing_scans(database, [
        "SELECT request_id, conversation_id FROM request_bindings",
        "SELECT conversation_id FROM request_bindings WHERE request_id = 'r'",
        "SELECT * FROM runs WHERE outcome IS NULL ORDER BY started_at_ms",
        "INSERT INTO history_events (conversation_id, seq, event_id, kind, payload, created_at_ms) VALUES ('c', 1, 'e', 'user', x'00', 1)",
        "SELECT * FROM history_events WHERE kind = 'user'",
    ])
    assert list(found) == ["SELECT request_id, conversation_id FROM request_bindings", "SELECT * FROM history_events WHERE kind = 'user'"]


def test_every_foreign_key_has_an_index_on_its_referencing_column(tmp_path: Path) -> None:
    """Deleting or re-keying a row checks the rows that refer to it: without an index that check
    reads the whole referencing table."""
    database = tmp_path / "state.db"
    build(database, 1, 1, 2)
    with contextlib.closing(sqlite3.connect(database)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            leading = {conn.execute(f"PRAGMA index_info({index[1]})").fetchone()[2] for index in conn.execute(f"PRAGMA index_list({table})")}
            for fk in conn.execute(f"PRAGMA foreign_key_list({table})"):
                assert fk[3] in leading, f"{table}.{fk[3]} refers to {fk[2]} but leads no index"


async def _python_memory_to_start(path: Path, provider: FakeProviderServer) -> int:
    tracemalloc.start()
    try:
        rig = await Rig(path, provider).start()
        assert rig.store is not None
        # Once its stored-ids snapshot is in (8 bytes an id, by design), not while its thread holds
        # the ids it is sorting: the memory a started server keeps, not a race with that thread.
        await snapshots_taken(rig.store)
        held = tracemalloc.get_traced_memory()[0]
        await rig.close()
    finally:
        tracemalloc.stop()
    return held


async def test_start_up_memory_does_not_grow_with_past_turns(
    tmp_path: Path, provider: FakeProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the stored-ids snapshot's cap (ids known absent without a read: 8 bytes an id), none is
    kept: what a start holds stops growing there (the cap made small here, below the big store's)."""
    monkeypatch.setattr(stored_ids, "SNAPSHOT_CAP", 5_000)
    (tmp_path / "empty").mkdir()
    (tmp_path / "big").mkdir()
    await asyncio.to_thread(build, tmp_path / "big" / "state.db", 2_000, 10, 2)  # 20,000 bindings and runs
    await _python_memory_to_start(tmp_path / "empty", provider)  # imports and first-use caches
    empty = await _python_memory_to_start(tmp_path / "empty", provider)
    big = await _python_memory_to_start(tmp_path / "big", provider)
    assert big - empty < 64 * 1024, f"{big - empty} bytes more held after opening 20,000 past turns"


async def test_a_retention_pass_is_bounded_too(tmp_path: Path) -> None:
    statements: list[str] = []
    database = tmp_path / "state.db"
    await asyncio.to_thread(build, database, 20, 3, 2)
    store = await Store.open(database, trace=statements.append)
    try:
        pruned = await store.apply_retention({"runs": 1, "traces": 1, "usage": 1}, now_ms=2**62)
    finally:
        await store.close()
    assert pruned == {"runs": 60, "traces": 0, "usage": 60}
    assert growing_scans(database, statements) == {}


def _checkpoint_bytes(database: Path, conversation_id: str) -> int:
    """The bytes of the conversation's stored checkpoint rows (states and their keys)."""
    with contextlib.closing(sqlite3.connect(database)) as conn:
        row = conn.execute(
            "SELECT COALESCE(SUM(length(state) + length(conversation_id) + length(COALESCE(run_id, ''))), 0)"
            " FROM checkpoints WHERE conversation_id = ?",
            (conversation_id,),
        ).fetchone()
    return int(row[0])


async def test_checkpoint_bytes_a_turn_adds_do_not_grow_with_the_conversation(rig: Rig, provider: FakeProviderServer) -> None:
    """Each turn the IDE sends back the checkpoint it got last (as Cursor does); what a turn adds
    to the stored checkpoints at turn ~100 stays within a small constant of what it adds at
    turn ~10, so a conversation's checkpoints grow linearly with its turns, not with their square."""
    ide = rig.ide()
    conv = uuid.uuid4().hex
    state: pb.ConversationStateStructure | None = None
    stored: dict[int, int] = {}
    for turn in range(1, 101):
        provider.enqueue(OPENAI_CHAT.text([f"answer {turn}"]))
        request = run_request(f"question {turn}", model=MODEL, conversation_id=conv)
        if state is not None:
            request.run_request.conversation_state.CopyFrom(state)
        log = await ide.turn(request)
        assert log.terminal is None, log.terminal
        state = [m.conversation_checkpoint_update for m in log.messages
                 if m.WhichOneof("message") == "conversation_checkpoint_update"][-1]
        if turn in (10, 20, 90, 100):
            assert rig.store is not None
            await rig.store.flush()
            stored[turn] = _checkpoint_bytes(rig.path, conv)
    early, late = (stored[20] - stored[10]) / 10, (stored[100] - stored[90]) / 10
    assert early > 0
    assert late - early < 256, f"a turn adds {early:.0f} checkpoint bytes at turns 11-20 but {late:.0f} at turns 91-100"
