"""A damaged state.db is found and named, with the way out (`cursor-byok db repair`), at start, by
/healthz, on every turn it breaks and in every CLI command; `db repair` salvages every readable row
into a new file and keeps the damaged one beside it. The damage is real: pages of the file overwritten."""
from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

from .test_storage_faults import MODEL, turn

WAY_OUT = "cursor-byok db repair"


@pytest.fixture
def config(tmp_path: Path, provider: FakeProviderServer) -> ServerConfig:
    return ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")])


def damage(database: Path, where: str) -> list[int]:
    """Overwrite the pages `where` (a condition on SQLite's dbstat table) with garbage; their numbers."""
    with contextlib.closing(sqlite3.connect(database)) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = [row[0] for row in conn.execute(f"SELECT pageno FROM dbstat WHERE {where}")]
    assert pages, where
    with open(database, "r+b") as fh:
        for page in pages:
            fh.seek((page - 1) * page_size)
            fh.write(bytes([0xA5]) * page_size)
    return pages


def health(server: ServerProcess) -> httpx.Response:
    return httpx.get(server.base_url + "/__byok-api__/healthz", timeout=5)


def unhealthy(server: ServerProcess, timeout: float = 20.0) -> httpx.Response:
    """The health answer once it is no longer 204 (the check after start found the damage)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = health(server)
        if answer.status_code != 204:
            return answer
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.02)


async def test_damaged_history_is_named_everywhere_and_db_repair_salvages_the_rest(
    config: ServerConfig, provider: FakeProviderServer, workspace: Path
) -> None:
    hurt, whole = uuid.uuid4().hex, uuid.uuid4().hex
    server = ServerProcess(config).start()
    provider.enqueue(OPENAI_CHAT.text(["whole answer"]), OPENAI_CHAT.text(["hurt answer"]))
    assert (await turn(server, workspace, whole, "whole question")).terminal is None
    assert (await turn(server, workspace, hurt, "hurt question " + "x" * 300_000)).terminal is None  # stored on overflow pages
    assert server.stop() == 0
    database = config.data_dir / "state.db"
    damage(database, "pagetype = 'overflow'")  # the big question's pages, and nothing else

    server = ServerProcess(config).start(ready=False)
    try:
        answer = await asyncio.to_thread(unhealthy, server)
        assert answer.status_code == 503 and answer.json()["code"] == "data_loss"
        assert str(database) in answer.json()["message"] and WAY_OUT in answer.json()["message"]
        [line] = [line for line in server.log().splitlines() if "database damaged" in line]
        assert str(database) in line and WAY_OUT in line

        broken = await turn(server, workspace, hurt, "again")
        assert broken.terminal is not None and broken.terminal.code == "data_loss", broken.terminal
        assert "database damaged" in broken.terminal.message and WAY_OUT in broken.terminal.message
        assert "try again" not in broken.terminal.message
        provider.enqueue(OPENAI_CHAT.text(["still fine"]))
        assert (await turn(server, workspace, whole, "more")).text == "still fine"
    finally:
        assert server.stop() == 0

    repair = server.run_to_exit("db", "repair")
    assert repair.returncode == 0, repair.stderr
    [kept] = [p for p in database.parent.glob("state.db.damaged-*") if not p.name.endswith(("-wal", "-shm"))]
    assert str(kept) in repair.stdout and "history_events" in repair.stdout, repair.stdout
    doctor = server.run_to_exit("doctor")
    assert "database damaged" not in doctor.stdout, doctor.stdout

    server = ServerProcess(config).start()
    try:
        provider.enqueue(OPENAI_CHAT.text(["after repair"]))
        assert (await turn(server, workspace, whole, "after")).text == "after repair"
        assert "whole question" in provider.requests[-1].body.decode()  # its history came through
        assert health(server).status_code == 204
    finally:
        assert server.stop() == 0


async def test_a_damaged_conversation_list_is_one_line_with_the_way_out(config: ServerConfig, provider: FakeProviderServer, workspace: Path) -> None:
    server = ServerProcess(config).start()
    provider.enqueue(OPENAI_CHAT.text(["answer"]))
    assert (await turn(server, workspace, uuid.uuid4().hex, "question")).terminal is None
    assert server.stop() == 0
    database = config.data_dir / "state.db"
    damage(database, "name = 'conversations' AND pagetype = 'leaf'")

    listing = server.run_to_exit("conversations", "list")
    lines = [line for line in listing.stderr.splitlines() if line.strip()]
    assert listing.returncode == 1 and len(lines) == 1, listing.stderr
    assert "(a bug)" not in lines[0] and "database damaged" in lines[0] and str(database) in lines[0] and WAY_OUT in lines[0]
    doctor = server.run_to_exit("doctor")
    assert doctor.returncode == 1 and "database damaged" in doctor.stdout and WAY_OUT in doctor.stdout, doctor.stdout

    repair = server.run_to_exit("db", "repair")
    assert repair.returncode == 0, repair.stderr
    assert server.run_to_exit("conversations", "list").returncode == 0
