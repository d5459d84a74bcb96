"""`conversations delete` leaves nothing of what the conversation said in the database: a real server
with detailed call records (each provider call's request and response bodies kept), real turns,
then the CLI deleting one conversation while the server runs."""
from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
import uuid
from pathlib import Path

from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

MODEL = "byok-deletion"
GONE = ("GONE-QUESTION", "GONE-FILE-CONTENT", "GONE-ANSWER")
KEPT = ("KEPT-QUESTION", "KEPT-ANSWER")
SHARED = "SHARED-FILE-CONTENT"  # read by both conversations


def rows_holding(db: Path, needle: str) -> dict[str, int]:
    """Table → rows with `needle` in any column (text or bytes)."""
    found: dict[str, int] = {}
    with contextlib.closing(sqlite3.connect(db)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            hits = sum(
                any(needle.encode() in (v if isinstance(v, bytes) else str(v).encode()) for v in row)
                for row in conn.execute(f"SELECT * FROM {table}")
            )
            if hits:
                found[table] = hits
    return found


def wait_for_call_records(db: Path, count: int, timeout: float = 15.0) -> None:
    """Call records are written after their run ends, without holding up its stream's end."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.closing(sqlite3.connect(db)) as conn:
            if conn.execute("SELECT COUNT(response_body) FROM provider_calls").fetchone()[0] >= count:
                return
        assert time.monotonic() < deadline, f"fewer than {count} provider call records with bodies"
        time.sleep(0.05)


async def conversation(ide: ScriptedIDE, provider: FakeProviderServer, workspace: Path, tag: str) -> str:
    read = [json.dumps({"path": str(workspace / f"{tag}.txt")}), json.dumps({"path": str(workspace / "shared.txt")})]
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec(f"{tag}-1", "Read", [read[0]]), CallSpec(f"{tag}-2", "Read", [read[1]])]),
        OPENAI_CHAT.text([f"{tag}-ANSWER"]),
    )
    conv = uuid.uuid4().hex
    log = await ide.turn(run_request(f"{tag}-QUESTION", model=MODEL, conversation_id=conv))
    assert log.terminal is None and log.text == f"{tag}-ANSWER"
    return conv


async def two_conversations(server: ServerProcess, provider: FakeProviderServer, workspace: Path) -> tuple[str, str]:
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        return await conversation(ide, provider, workspace, "GONE"), await conversation(ide, provider, workspace, "KEPT")
    finally:
        await ide.close()


def test_a_deleted_conversation_leaves_none_of_its_content(run_cli, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "GONE.txt").write_text("GONE-FILE-CONTENT\n")
    (workspace / "KEPT.txt").write_text("KEPT-FILE-CONTENT\n")
    (workspace / "shared.txt").write_text(f"{SHARED}\n")
    with FakeProviderServer() as provider:
        config = ServerConfig(
            data_dir=tmp_path / "data",
            models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
            extra_toml="[observability]\ndetailed = true\n",
        )
        with ServerProcess(config) as server:
            gone, kept = asyncio.run(two_conversations(server, provider, workspace))
            db = config.data_dir / "state.db"
            wait_for_call_records(db, 4)
            for needle in (*GONE, *KEPT, SHARED):
                assert "provider_calls" in rows_holding(db, needle), needle  # the bodies were kept

            deleted = run_cli("conversations", "delete", gone, "--config", str(server.config_path))
            assert (deleted.code, deleted.out.splitlines()) == (
                0, [f"deleted 1 conversation(s): {gone}", "erased the request and response bodies of 2 provider call record(s)"]
            )

            for needle in GONE:
                assert rows_holding(db, needle) == {}, needle
            for needle in (*KEPT, SHARED):  # the other conversation's, and what both read, stay
                assert {"history_events", "provider_calls"} <= rows_holding(db, needle).keys(), needle
            with contextlib.closing(sqlite3.connect(db)) as conn:
                # The deleted conversation's call records stay for the usage figures, without bodies.
                calls = conn.execute(
                    "SELECT COUNT(*), COUNT(request_body), COUNT(response_body) FROM provider_calls WHERE conversation_id = ?", (gone,)
                ).fetchone()
                assert calls == (2, 0, 0)
                assert conn.execute("SELECT COUNT(*) FROM provider_calls WHERE conversation_id = ? AND response_body IS NOT NULL", (kept,)).fetchone() == (2,)
                assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
