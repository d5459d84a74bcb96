"""A team server: developers, their tokens, their usage and their budgets, as an operator and the
developers' IDEs meet them. The real `cursor-byok serve` in team mode, the `users` and `usage`
commands run as an operator runs them, the scripted IDE sending each developer's token, a fake
provider that counts what reached it."""
from __future__ import annotations

import asyncio
import hashlib
import json
import re
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, UsageSpec
from tests.harness.ide import BIDI_APPEND, RUN_SSE, ScriptedIDE, StreamLog, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess
from tests.harness.stored import stored_rows

from .test_crash_recovery import wait_until
from .test_observability import wait_for

MODEL = "byok-team"
PRICE = "price = { input = 3.0, output = 15.0 }"
TOKEN_HEADER = "x-cursor-byok-token"
# What the IDE sends as its own credential: Cursor's token, never ours.
CURSOR_BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9.cursor-session.signature"


def team_config(data_dir: Path, provider: FakeProviderServer, team: str = "", **fields: Any) -> ServerConfig:
    """A team server with one priced model on the fake provider."""
    return ServerConfig(
        data_dir=data_dir,
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1", extra=PRICE)],
        runsse_wait_seconds=1.5,
        extra_toml=f"[team]\nenabled = true\n{team}",
        **fields,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, shared_provider: FakeProviderServer) -> Iterator[ServerProcess]:
    config = team_config(tmp_path_factory.mktemp("team") / "data", shared_provider, "monthly_budget_usd = 100.0\nrefresh_seconds = 0.5\n")
    with ServerProcess(config) as proc:
        yield proc


def add_user(server: ServerProcess, name: str, *extra: str) -> str:
    """`users add NAME`: the token, printed once, alone on its line."""
    done = server.run_to_exit("users", "add", name, *extra)
    assert done.returncode == 0, done.stderr
    tokens = [line for line in done.stdout.splitlines() if re.fullmatch(r"[A-Za-z0-9_-]{40,}", line.strip())]
    assert len(tokens) == 1, done.stdout
    return tokens[0].strip()


def ide_of(server: ServerProcess, workspace: Path, token: str) -> ScriptedIDE:
    ide = ScriptedIDE(server.base_url, workspace)
    ide.client.headers[TOKEN_HEADER] = token
    ide.client.headers["authorization"] = CURSOR_BEARER  # as Cursor sends it beside ours
    return ide


async def one_turn(server: ServerProcess, workspace: Path, token: str, text: str = "hello") -> Any:
    ide = ide_of(server, workspace, token)
    try:
        return await ide.turn(run_request(text, model=MODEL, conversation_id=uuid.uuid4().hex))
    finally:
        await ide.close()


async def assert_not_theirs(ide: ScriptedIDE, intruder: ScriptedIDE, request_id: str) -> StreamLog:
    """Another developer's RunSSE on `ide`'s run (held at its first exec) finds no run, and their
    answer to that exec is refused; what the intruder's stream got, returned."""
    stolen = StreamLog()
    await asyncio.wait_for(intruder.stream(request_id, stolen), 10)
    assert stolen.terminal is not None and stolen.terminal.code == "not_found", (stolen.kinds(), stolen.terminal)
    [reply] = ide.execute(ide.held[0][1])
    refused = await intruder.append(request_id, reply, seqno=1)
    assert refused.status_code == 403 and refused.json()["code"] == "permission_denied", refused.text
    return stolen


def get(server: ServerProcess, path: str, token: str) -> httpx.Response:
    return httpx.get(f"{server.base_url}{path}", headers={TOKEN_HEADER: token}, timeout=5)


def test_users_cli_round_trip_shows_the_token_once_and_stores_only_its_hash(server: ServerProcess) -> None:
    token = add_user(server, "erin")
    assert len(token) >= 43  # 256 random bits, URL-safe

    again = server.run_to_exit("users", "add", "erin")
    assert again.returncode != 0 and "erin" in again.stderr and token not in again.stdout + again.stderr

    listed = server.run_to_exit("users", "list")
    assert listed.returncode == 0, listed.stderr
    assert "erin" in listed.stdout and token not in listed.stdout
    rows = json.loads(server.run_to_exit("users", "list", "--json").stdout)
    [erin] = [r for r in rows if r["name"] == "erin"]
    assert erin["revoked_at_ms"] is None and erin["created_at_ms"] > 0 and erin["cost_this_month"] in (0, 0.0, None)
    assert not any(token in json.dumps(r) for r in rows)

    # In the database: the token's SHA-256, never the token, in any file of it.
    db = sqlite3.connect(f"file:{server.config.data_dir / 'state.db'}?mode=ro", uri=True)
    try:
        stored = db.execute("SELECT token_sha256 FROM developers WHERE name = 'erin'").fetchone()
    finally:
        db.close()
    assert stored == (hashlib.sha256(token.encode()).hexdigest(),)
    for path in server.config.data_dir.glob("state.db*"):
        assert token.encode() not in path.read_bytes(), path

    revoked = server.run_to_exit("users", "revoke", "erin")
    assert revoked.returncode == 0, revoked.stderr
    rows = json.loads(server.run_to_exit("users", "list", "--json").stdout)
    assert [r["revoked_at_ms"] is not None for r in rows if r["name"] == "erin"] == [True]
    assert server.run_to_exit("users", "revoke", "nobody").returncode != 0


async def test_no_token_or_only_cursors_bearer_is_refused_on_every_route_but_health(server: ServerProcess) -> None:
    token = add_user(server, "frank")
    async with httpx.AsyncClient(base_url=server.base_url, timeout=5) as client:
        for headers in ({}, {"authorization": CURSOR_BEARER}, {"authorization": f"Bearer {token}"}, {TOKEN_HEADER: "x" * 43}):
            for method, path, body_type in (
                ("POST", BIDI_APPEND, "application/proto"), ("POST", RUN_SSE, "application/connect+proto"),
                ("GET", "/metrics", None), ("GET", "/ui/api/usage", None), ("POST", "/aiserver.v1.AiService/AvailableModels", "application/proto"),
            ):
                sent = {**headers, **({"content-type": body_type} if body_type else {})}
                resp = await client.request(method, path, headers=sent, content=b"" if body_type else None)
                assert resp.status_code == 401, (headers, path, resp.status_code, resp.text)
        assert (await client.get("/__byok-api__/healthz")).status_code == 204
        assert (await client.get("/metrics", headers={TOKEN_HEADER: token})).status_code == 200
        # The token as a path prefix, for a client that can only be given a base URL.
        assert (await client.get(f"/_token/{token}/metrics")).status_code == 200
        assert (await client.get(f"/_token/{'y' * 43}/metrics")).status_code == 401


async def test_two_developers_usage_is_kept_apart(server: ServerProcess, provider: FakeProviderServer, workspace: Path) -> None:
    alice, bob = add_user(server, "alice"), add_user(server, "bob")
    provider.enqueue(OPENAI_CHAT.text(["for alice"], usage=UsageSpec(input=1000, output=100)))
    log = await one_turn(server, workspace, alice)
    assert log.terminal is None and log.text == "for alice"
    provider.enqueue(OPENAI_CHAT.text(["for bob"], usage=UsageSpec(input=2000, output=10)))
    provider.enqueue(OPENAI_CHAT.text(["bob again"], usage=UsageSpec(input=3000, output=20)))
    for text in ("one", "two"):
        log = await one_turn(server, workspace, bob, text)
        assert log.terminal is None, log.terminal

    def by_user() -> dict[str, dict[str, Any]]:
        done = server.run_to_exit("usage", "--by", "user", "--json")
        assert done.returncode == 0, done.stderr
        return {r["group"]: r for r in json.loads(done.stdout)["rows"] if r["group"] in ("alice", "bob")}

    rows = wait_for(by_user, lambda r: r.get("alice", {}).get("calls") == 1 and r.get("bob", {}).get("calls") == 2)
    assert (rows["alice"]["calls"], rows["alice"]["input_tokens"], rows["alice"]["output_tokens"]) == (1, 1000, 100)
    assert (rows["bob"]["calls"], rows["bob"]["input_tokens"], rows["bob"]["output_tokens"]) == (2, 5000, 30)
    assert rows["alice"]["cost"] == pytest.approx((1000 * 3 + 100 * 15) / 1e6)
    assert rows["bob"]["cost"] == pytest.approx((5000 * 3 + 30 * 15) / 1e6)
    table = server.run_to_exit("usage", "--by", "user").stdout
    assert re.search(r"^alice\s", table, re.M) and re.search(r"^bob\s", table, re.M), table

    # The dashboard's API, with either developer's token.
    api = get(server, "/ui/api/usage?by=user", bob).json()
    dashboard = {r["group"]: r for r in api["rows"]}
    assert (dashboard["alice"]["calls"], dashboard["bob"]["calls"]) == (1, 2)
    assert dashboard["bob"]["cost"] == pytest.approx(rows["bob"]["cost"])
    assert "user" in get(server, "/ui/app.js", alice).text  # the page shows the developers' table

    # /metrics: the usage and cost counters carry the developer.
    text = get(server, "/metrics", alice).text
    assert re.search(r'^cursor_byok_tokens_total\{[^}]*kind="input"[^}]*user="alice"[^}]*\} 1000\.0$', text, re.M), text
    assert re.search(r'^cursor_byok_tokens_total\{[^}]*kind="input"[^}]*user="bob"[^}]*\} 5000\.0$', text, re.M), text
    cost = re.search(r'^cursor_byok_cost_usd_total\{[^}]*user="bob"[^}]*\} (\S+)$', text, re.M)
    assert cost is not None and float(cost.group(1)) == pytest.approx(rows["bob"]["cost"])

    # Keys stay on the server: nothing a developer was sent holds any of the provider key.
    key = server.env()["CURSOR_BYOK_TEST_KEY"]
    seen = [log.raw.decode("latin-1"), text, json.dumps(api), get(server, "/ui/api/models", bob).text]
    seen += [get(server, f"/ui/api/{path}", alice).text for path in ("overview", "conversations", "live")]
    async with httpx.AsyncClient(base_url=server.base_url, timeout=5) as client:
        models = await client.post("/aiserver.v1.AiService/AvailableModels", content=b"", headers={TOKEN_HEADER: alice, "content-type": "application/proto"})
    assert models.status_code == 200 and MODEL.encode() in models.content
    seen.append(models.content.decode("latin-1"))
    assert key and all(key not in part for part in seen)

    # The same records in the database, each with its developer.
    db = sqlite3.connect(f"file:{server.config.data_dir / 'state.db'}?mode=ro", uri=True)
    try:
        calls = db.execute("SELECT user_name, COUNT(*) FROM provider_calls WHERE user_name IN ('alice', 'bob') GROUP BY user_name").fetchall()
        runs = db.execute("SELECT user_name, COUNT(*) FROM usage WHERE user_name IN ('alice', 'bob') GROUP BY user_name").fetchall()
    finally:
        db.close()
    assert sorted(calls) == [("alice", 1), ("bob", 2)] and sorted(runs) == [("alice", 1), ("bob", 2)]


async def test_a_revoked_token_is_refused(server: ServerProcess, provider: FakeProviderServer, workspace: Path) -> None:
    token = add_user(server, "carol")
    provider.enqueue(OPENAI_CHAT.text(["hi carol"]))
    log = await one_turn(server, workspace, token)
    assert log.terminal is None and log.text == "hi carol"
    assert get(server, "/metrics", token).status_code == 200
    provider.forget()

    revoked = server.run_to_exit("users", "revoke", "carol")
    assert revoked.returncode == 0, revoked.stderr
    # The running server is told at once (and every instance rereads within refresh_seconds).
    status = wait_for(lambda: get(server, "/metrics", token).status_code, lambda s: s == 401, timeout=5.0)
    assert status == 401
    provider.enqueue(OPENAI_CHAT.text(["never"]))
    ide = ide_of(server, workspace, token)
    try:
        refused = await ide.append(uuid.uuid4().hex, run_request("after", model=MODEL, conversation_id=uuid.uuid4().hex))
    finally:
        await ide.close()
    assert refused.status_code == 401
    assert provider.requests == []


async def test_a_turn_past_the_budget_ends_resource_exhausted_before_any_provider_call(
    server: ServerProcess, provider: FakeProviderServer, workspace: Path
) -> None:
    token = add_user(server, "dave")
    budget = server.run_to_exit("users", "budget", "dave", "0.001")
    assert budget.returncode == 0, budget.stderr
    # 1000 x 3 + 100 x 15 per million: $0.0045, past the $0.001 budget.
    provider.enqueue(OPENAI_CHAT.text(["spent"], usage=UsageSpec(input=1000, output=100)))
    log = await one_turn(server, workspace, token)
    assert log.terminal is None and log.text == "spent"
    provider.wait_for_requests(1)

    provider.forget()
    provider.enqueue(OPENAI_CHAT.text(["never"]))
    log = await one_turn(server, workspace, token, "more")
    assert log.terminal is not None and log.terminal.code == "resource_exhausted", log.terminal
    assert "budget" in log.terminal.message and "dave" in log.terminal.message
    [details] = log.terminal.details  # what the IDE shows the text by; a retry is refused the same way
    assert details.is_retryable is False and "monthly budget" in details.detail
    assert provider.requests == []

    # Another developer under the default budget goes on.
    provider.forget()  # the reply the refused turn never took
    other = add_user(server, "gina")
    provider.enqueue(OPENAI_CHAT.text(["fine"]))
    log = await one_turn(server, workspace, other)
    assert log.terminal is None and log.text == "fine"
    rows = json.loads(server.run_to_exit("users", "list", "--json").stdout)
    [dave] = [r for r in rows if r["name"] == "dave"]
    assert dave["budget_usd"] == pytest.approx(0.001) and dave["cost_this_month"] == pytest.approx(0.0045)
    assert (dave["calls_this_month"], dave["input_tokens_this_month"], dave["output_tokens_this_month"]) == (1, 1000, 100)


async def test_a_turn_resumed_after_a_crash_stays_its_developers(
    store_url: str, tmp_path: Path, provider: FakeProviderServer, workspace: Path
) -> None:
    """The server is SIGKILLed while a developer's turn waits for a tool result; after the restart
    the resumed run, and the provider call it makes, are still that developer's (on either store)."""
    config = team_config(tmp_path / "data", provider, extra_server={"recovery_wait_seconds": 5.0}, store_url=store_url)
    server = ServerProcess(config)
    token = add_user(server, "hank")
    server.start()
    (workspace / "a.txt").write_text("ALPHA\n")
    ide = ide_of(server, workspace, token)
    ide.hold_execs = True
    provider.enqueue(OPENAI_CHAT.tool_calls([CallSpec("call_a", "Read", [json.dumps({"path": str(workspace / "a.txt")})])]))
    conversation_id, request_id = uuid.uuid4().hex, uuid.uuid4().hex
    try:
        reader = asyncio.create_task(ide.stream(request_id, StreamLog()))
        sent = await ide.append(request_id, run_request("read it", model=MODEL, conversation_id=conversation_id))
        assert sent.status_code == 200
        await wait_until(lambda: len(ide.held) == 1)
        server.kill()
        await asyncio.wait_for(reader, 10)

        server.start()
        provider.enqueue(OPENAI_CHAT.text(["read it"], usage=UsageSpec(input=500, output=5)))
        await ide.reconnect()
        ide.client.headers[TOKEN_HEADER] = token
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(request_id, log))
        for reply in ide.execute(ide.held[0][1]):
            assert (await ide.append(request_id, reply)).status_code == 200
        await asyncio.wait_for(reader, 20)
    finally:
        await ide.close()
    assert log.terminal is None and log.text == "read it", log.terminal

    def rows() -> list[tuple[Any, ...]]:
        return stored_rows(config, "SELECT input_tokens, user_name FROM provider_calls WHERE conversation_id = ? ORDER BY started_at_ms", (conversation_id,))

    # The call cut by the kill left no record (its record waits for its tools); the resumed one did.
    calls = wait_for(rows, lambda r: any(tokens == 500 for tokens, _ in r))
    assert calls and [user for _, user in calls] == ["hank"] * len(calls), calls
    server.stop()


async def test_with_the_servers_own_token_the_dashboard_and_metrics_are_the_operators(
    tmp_path: Path, provider: FakeProviderServer, workspace: Path
) -> None:
    """Every developer's conversations and usage are on the dashboard: when the server has its own
    auth token, only that token opens it and /metrics; a developer's token still runs turns."""
    admin = "operator-" + "k" * 32
    server = ServerProcess(team_config(tmp_path / "data", provider, extra_server={"auth_token_env": "TEAM_ADMIN"}), env={"TEAM_ADMIN": admin})
    token = add_user(server, "ivy")
    server.start()
    try:
        for path in ("/metrics", "/ui/api/usage?by=user", "/ui/"):
            assert get(server, path, token).status_code == 403, path
            assert get(server, path, admin).status_code == 200, path
        provider.enqueue(OPENAI_CHAT.text(["hi ivy"]))
        log = await one_turn(server, workspace, token)
        assert log.terminal is None and log.text == "hi ivy"
    finally:
        server.stop()


async def test_a_developer_cannot_read_or_append_to_anothers_stream(
    server: ServerProcess, provider: FakeProviderServer, workspace: Path
) -> None:
    owner, other = add_user(server, "judy"), add_user(server, "ken")
    (workspace / "a.txt").write_text("ALPHA\n")
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("call_a", "Read", [json.dumps({"path": str(workspace / "a.txt")})])]),
        OPENAI_CHAT.text(["judy's answer"]),
    )
    ide, intruder = ide_of(server, workspace, owner), ide_of(server, workspace, other)
    ide.hold_execs = True
    request_id = uuid.uuid4().hex
    try:
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(request_id, log))
        assert (await ide.append(request_id, run_request("read it", model=MODEL, conversation_id=uuid.uuid4().hex))).status_code == 200
        await wait_until(lambda: len(ide.held) == 1)
        live = get(server, "/ui/api/live", owner).json()["runs"]
        assert [run["user"] for run in live] == ["judy"], live  # the dashboard's live runs

        stolen = await assert_not_theirs(ide, intruder, request_id)
        assert "judy" not in stolen.raw.decode("latin-1")

        for message in ide.execute(ide.held[0][1]):
            assert (await ide.append(request_id, message)).status_code == 200
        await asyncio.wait_for(reader, 20)
    finally:
        await ide.close()
        await intruder.close()
    assert log.terminal is None and log.text == "judy's answer"


async def test_a_team_server_on_either_store(store_url: str, tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    """The access layer on the embedded store and on PostgreSQL alike: developers added by the
    CLI beside a running server, their usage apart, a budget, a revocation."""
    server = ServerProcess(team_config(tmp_path / "data", provider, store_url=store_url))
    server.start()
    try:
        lena, mia = add_user(server, "lena"), add_user(server, "mia", "--budget", "0.001")
        provider.enqueue(OPENAI_CHAT.text(["for lena"], usage=UsageSpec(input=100, output=1)))
        provider.enqueue(OPENAI_CHAT.text(["for mia"], usage=UsageSpec(input=1000, output=100)))
        assert (await one_turn(server, workspace, lena)).text == "for lena"
        assert (await one_turn(server, workspace, mia)).text == "for mia"
        provider.forget()
        refused = await one_turn(server, workspace, mia)
        assert refused.terminal is not None and refused.terminal.code == "resource_exhausted" and provider.requests == []

        def by_user() -> dict[str, tuple[int, int]]:
            rows = json.loads(server.run_to_exit("usage", "--by", "user", "--json").stdout)["rows"]
            return {r["group"]: (r["calls"], r["input_tokens"]) for r in rows}

        assert wait_for(by_user, lambda r: len(r) == 2) == {"lena": (1, 100), "mia": (1, 1000)}
        assert server.run_to_exit("users", "revoke", "lena").returncode == 0
        assert wait_for(lambda: get(server, "/metrics", lena).status_code, lambda s: s == 401, timeout=5.0) == 401
    finally:
        server.stop()
