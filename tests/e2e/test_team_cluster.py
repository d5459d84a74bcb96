"""A team server of two instances on one PostgreSQL database (issue 37): a developer's turn split
across the instances (no affinity: the RunSSE on A, the run request on B, which then runs it, the
tool's result through A, forwarded to B) is theirs on the instance that runs it (its usage row names
them), and another developer's append forwarded to that run, or RunSSE relayed from it, is refused
there as on one instance."""
from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from cursor_byok.protocol import RUN_SSE_PATH
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.balancer import balanced_client
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

from .test_cluster import running
from .test_crash_recovery import wait_until
from .test_team import CURSOR_BEARER, MODEL, PRICE, TOKEN_HEADER, add_user, assert_not_theirs


@pytest.fixture
def team_pair(tmp_path: Path, provider: FakeProviderServer, postgres_url: str) -> Iterator[list[ServerProcess]]:
    yield from running([
        ServerConfig(
            data_dir=tmp_path / name,
            models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1", extra=PRICE)],
            runsse_wait_seconds=5.0,
            extra_toml=f'[team]\nenabled = true\n\n[store]\nurl = "{postgres_url}"\n\n[cluster]\nlease_seconds = 1.0\n',
        )
        for name in ("a", "b")
    ])


def split_ide(a: ServerProcess, appends_to: dict[str, str], workspace: Path, token: str) -> ScriptedIDE:
    """The IDE's RunSSE to A, its appends wherever `appends_to["url"]` says at the time."""
    ide = ScriptedIDE(a.base_url, workspace)
    ide.client = balanced_client(lambda request: a.base_url if request.url.path == RUN_SSE_PATH else appends_to["url"])
    ide.client.headers[TOKEN_HEADER] = token
    ide.client.headers["authorization"] = CURSOR_BEARER
    return ide


async def test_a_developers_split_turn_is_theirs_on_the_instance_that_runs_it(
    team_pair, provider: FakeProviderServer, workspace: Path, postgres_url: str
) -> None:
    a, b = team_pair
    alice, mallory = add_user(a, "alice"), add_user(a, "mallory")  # added through A; B learns them on first sight
    (workspace / "x.txt").write_text("KILO\n")
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("call_x", "Read", [json.dumps({"path": str(workspace / "x.txt")})])]),
        OPENAI_CHAT.text(["alice's answer"]),
    )
    appends_to = {"url": b.base_url}
    ide, intruder = split_ide(a, appends_to, workspace, alice), split_ide(a, appends_to, workspace, mallory)
    ide.hold_execs = True
    request_id = uuid.uuid4().hex
    try:
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(request_id, log))
        started = await ide.append(request_id, run_request("read x", model=MODEL, conversation_id=uuid.uuid4().hex))
        assert started.status_code == 200, started.text
        await wait_until(lambda: len(ide.held) == 1)
        appends_to["url"] = a.base_url  # B runs the turn: what comes through A is forwarded to it
        await assert_not_theirs(ide, intruder, request_id)  # the RunSSE relayed from B, the append forwarded to it
        for message in ide.execute(ide.held[0][1]):
            assert (await ide.append(request_id, message)).status_code == 200
        await asyncio.wait_for(reader, 30)
    finally:
        await ide.close()
        await intruder.close()
    assert log.terminal is None and log.text == "alice's answer", (log.kinds(), log.terminal)
    with psycopg.connect(postgres_url) as conn:
        users = {row[0] for row in conn.execute("SELECT user_name FROM usage")}
        calls = {row[0] for row in conn.execute("SELECT user_name FROM provider_calls")}
    assert users == {"alice"} and calls == {"alice"}, (users, calls)
