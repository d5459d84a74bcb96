"""`cursor-byok db stats|backup|vacuum`: stats and a consistent backup beside a serving server, a
vacuum only without one (it applies the retention ages first)."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import stat
import uuid
from pathlib import Path

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.fakes.fixtures import provider, shared_provider  # noqa: F401  (fixtures)
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess
from tests.harness.synthetic_history import build

MODEL = "byok-db"


def rows(db: Path, sql: str) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute(sql).fetchall()


def test_stats_count_what_the_database_holds_and_its_size_per_turn(run_cli, write_config):
    path = write_config()
    db = path.parent / "data" / "state.db"
    db.parent.mkdir()
    build(db, 30, 4, 5)
    result = run_cli("db", "stats", "--config", str(path))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith(f"database: {db}: ")
    assert lines[2].startswith("turns: 120, ") and lines[2].endswith(" per turn")
    counted = {line.split()[0]: line.split()[1] for line in lines[4:-1]}
    assert counted["conversations"] == "30" and counted["history_events"] == "600" and counted["request_bindings"] == "120"
    assert lines[-1].startswith("retention: runs 180 days, traces 30 days, usage 400 days")
    as_json = json.loads(run_cli("db", "stats", "--json", "--sizes", "--config", str(path)).out)
    assert as_json["turns"] == 120 and as_json["rows"]["runs"] == 120
    assert as_json["bytes_per_turn"] == as_json["used_bytes"] / 120
    assert as_json["table_bytes"]["history_events"] > as_json["table_bytes"]["conversations"] > 0


def test_without_a_database_each_command_says_so(run_cli, write_config):
    path = write_config()
    for args in (("stats",), ("vacuum",), ("backup", str(path.parent / "copy.db"))):
        result = run_cli("db", *args, "--config", str(path))
        assert result.code == 1 and result.err_lines == [f"cursor-byok: no database yet ({path.parent / 'data' / 'state.db'} does not exist)"]


def test_a_backup_taken_while_the_server_serves_is_consistent_and_private(run_cli, tmp_path: Path, provider: FakeProviderServer):
    config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")])
    provider.respond_with(lambda request: OPENAI_CHAT.text(["ok"]))
    with ServerProcess(config) as server:
        cfg = ["--config", str(server.config_path)]

        async def turns_during(backup: asyncio.Future[object]) -> int:
            """Turns until the backup is done, three at least."""
            ide = ScriptedIDE(server.base_url, tmp_path)
            done = 0
            try:
                while done < 3 or not backup.done():
                    log = await ide.turn(run_request(f"turn {done}", model=MODEL, conversation_id=uuid.uuid4().hex))
                    assert log.terminal is None
                    done += 1
            finally:
                await ide.close()
            return done

        async def both(dest: Path, *extra: str) -> None:
            before: asyncio.Future[object] = asyncio.get_running_loop().create_future()
            before.set_result(None)
            await turns_during(before)  # three turns before the backup starts
            backup = asyncio.get_running_loop().run_in_executor(None, run_cli, "db", "backup", str(dest), *extra, *cfg)
            await turns_during(backup)
            result = await backup
            assert result.code == 0 and result.out.startswith(f"backed up {config.data_dir / 'state.db'} to {dest}: "), result.err

        for name, extra in (("copy.db", ()), ("compact.db", ("--compact",))):
            dest = tmp_path / name
            asyncio.run(both(dest, *extra))
            assert rows(dest, "PRAGMA integrity_check") == [("ok",)]
            assert rows(dest, "PRAGMA journal_mode") == [("delete",)] and not Path(f"{dest}-wal").exists()
            if os.name == "posix":
                assert stat.S_IMODE(dest.stat().st_mode) == 0o600
            # Every run in the copy has its conversation: one moment's state, not a mix.
            assert rows(dest, "SELECT COUNT(*) FROM runs WHERE conversation_id NOT IN (SELECT conversation_id FROM conversations)") == [(0,)]
            assert rows(dest, "SELECT COUNT(*) FROM conversations")[0][0] >= 3
        again = run_cli("db", "backup", str(tmp_path / "copy.db"), *cfg)
        assert again.code == 1 and again.err_lines == [f"cursor-byok: {tmp_path / 'copy.db'} exists: choose another file, or remove it first"]
        busy = run_cli("db", "vacuum", *cfg)
        assert busy.code == 1 and len(busy.err_lines) == 1
        assert "stop it first to vacuum" in busy.err and "db backup FILE --compact" in busy.err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no partial copy left


def test_vacuum_applies_retention_then_gives_free_pages_back(run_cli, write_config):
    path = write_config("[retention]\nruns_days = 30\nusage_days = 0\n")
    db = path.parent / "data" / "state.db"
    db.parent.mkdir()
    build(db, 200, 5, 4)  # runs spread over the past year
    runs, usage = rows(db, "SELECT (SELECT COUNT(*) FROM runs), (SELECT COUNT(*) FROM usage)")[0]
    recent = rows(db, "SELECT COUNT(*) FROM runs WHERE ended_at_ms >= strftime('%s', 'now') * 1000 - 30 * 86400000")[0][0]
    before = db.stat().st_size
    result = run_cli("db", "vacuum", "--config", str(path))
    assert result.code == 0, result.err
    assert result.out.splitlines()[0] == f"retention: deleted {runs - recent:,} runs"
    assert rows(db, "SELECT (SELECT COUNT(*) FROM runs), (SELECT COUNT(*) FROM usage)") == [(recent, usage)]
    assert rows(db, "PRAGMA freelist_count") == [(0,)] and db.stat().st_size < before
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]
