"""What the server records of a turn, seen the way an operator sees it: the provider call records
(through the dashboard's API and in the database), /metrics, and the JSON log lines, with the ids of
the turn and the token counts the provider reported. And the API key appears in none of them."""
from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, UsageSpec, sse
from tests.harness.ide import BIDI_APPEND, ScriptedIDE, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

MODEL = "byok-observed"
CANARY = "sk-canary-7f3a9c21d4e8b605"
PRICE = 'price = { input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 }'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, shared_provider: FakeProviderServer) -> Iterator[ServerProcess]:
    config = ServerConfig(
        data_dir=tmp_path_factory.mktemp("observed") / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=shared_provider.url + "/v1", extra=PRICE)],
        runsse_wait_seconds=1.5,
        extra_toml='[observability]\nlog_format = "json"\ndetailed = true\n',
    )
    with ServerProcess(config, env={"CURSOR_BYOK_TEST_KEY": CANARY}) as proc:
        yield proc


def wait_for(fetch: Any, ready: Any, timeout: float = 10.0) -> Any:
    """Poll `fetch()` until `ready(value)`: records are written after the turn, off its path."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if ready(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def ui(server: ServerProcess, path: str) -> Any:
    resp = httpx.get(f"{server.base_url}/ui/api/{path}", timeout=5)
    assert resp.status_code == 200, resp.text
    return resp.json()


def metrics(server: ServerProcess) -> dict[str, float]:
    text = httpx.get(f"{server.base_url}/metrics", timeout=5).text
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(cursor_byok_\S+) (\S+)$", text, re.M)}


def json_lines(server: ServerProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in server.log_path.read_text().splitlines() if line.startswith("{")]


async def test_a_turn_with_a_tool_call_leaves_its_call_records_metrics_and_log_lines(
    server: ServerProcess, provider: FakeProviderServer, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("remember the milk\n")
    provider.enqueue(
        OPENAI_CHAT.overloaded(),  # one retry: a log line from inside the provider call
        OPENAI_CHAT.tool_calls([CallSpec("c1", "Read", [json.dumps({"path": str(workspace / "notes.txt")})])],
                               usage=UsageSpec(input=40, output=7, cache_read=10)),
        OPENAI_CHAT.text(["done"], usage=UsageSpec(input=60, output=3, cache_read=50)),
    )
    before = metrics(server)
    conversation_id, request_id, cursor_run_id = uuid.uuid4().hex, uuid.uuid4().hex, uuid.uuid4().hex
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        log = await ide.turn(run_request("read my notes", model=MODEL, conversation_id=conversation_id, run_id=cursor_run_id), request_id=request_id)
    finally:
        await ide.close()
    assert log.terminal is None and log.text == "done"

    # The call records, as the dashboard's API gives them.
    detail = wait_for(lambda: ui(server, f"conversations/{conversation_id}"), lambda d: d["runs"] and len(d["runs"][0]["calls"]) == 2)
    [run] = detail["runs"]
    first, second = run["calls"]
    assert run["outcome"] == "succeeded" and run["user_message"] == "read my notes" and run["trace_id"]
    assert run["phases"].keys() >= {"preparing", "modeling", "waiting_tools", "checkpointing"}
    for seq, call in enumerate((first, second), 1):
        assert (call["trace_id"], call["seq"], call["conversation_id"], call["run_id"]) == (run["trace_id"], seq, conversation_id, run["run_id"])
        assert (call["request_id"], call["cursor_run_id"]) == (request_id, cursor_run_id)
        assert (call["model_id"], call["provider"], call["upstream_model"], call["purpose"]) == (MODEL, "openai-chat", "fake-model", "cycle")
        assert call["http_status"] == 200 and call["error_kind"] is None and call["has_bodies"]
        assert 0 <= call["ttfb_ms"] <= call["first_event_ms"] <= call["ttft_ms"] <= call["duration_ms"]
    assert (first["input_tokens"], first["output_tokens"], first["cache_read_tokens"]) == (50, 7, 10)
    assert (second["input_tokens"], second["output_tokens"], second["cache_read_tokens"]) == (110, 3, 50)
    assert (first["finish_reason"], second["finish_reason"], first["attempts"], second["attempts"]) == ("tool_use", "end_turn", 2, 1)
    [tool] = first["tools"]
    assert tool["id"] == "c1" and tool["name"] == "Read" and tool["ms"] >= 0 and not tool["error"]
    assert second["tools"] == []
    # USD: (40 uncached x 3 + 10 cached x 0.3 + 7 x 15) / 1e6, and the second call's likewise.
    assert first["cost"] == pytest.approx((40 * 3 + 10 * 0.3 + 7 * 15) / 1e6)
    assert run["cost"] == pytest.approx(first["cost"] + (60 * 3 + 50 * 0.3 + 3 * 15) / 1e6)

    # The same records in the database, under the run's trace id (never the request id).
    db = sqlite3.connect(f"file:{server.config.data_dir / 'state.db'}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT trace_id, seq, request_id, input_tokens, output_tokens, cache_read_tokens FROM provider_calls "
            "WHERE conversation_id = ? ORDER BY seq", (conversation_id,)
        ).fetchall()
        usage = db.execute("SELECT trace_id, outcome, calls, tool_calls, input_tokens FROM usage WHERE run_id = ?", (run["run_id"],)).fetchone()
    finally:
        db.close()
    assert rows == [(run["trace_id"], 1, request_id, 50, 7, 10), (run["trace_id"], 2, request_id, 110, 3, 50)]
    assert run["trace_id"] != request_id
    assert usage == (run["trace_id"], "succeeded", 2, 1, 160)

    # Metrics: this turn's run, calls, tokens and tool round trip.
    after = metrics(server)

    def grew(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert grew(f'cursor_byok_runs_total{{model="{MODEL}",outcome="succeeded"}}') == 1
    assert grew(f'cursor_byok_provider_calls_total{{model="{MODEL}",provider="openai-chat",result="ok"}}') == 2
    assert grew(f'cursor_byok_tokens_total{{kind="input",model="{MODEL}"}}') == 160
    assert grew(f'cursor_byok_tokens_total{{kind="output",model="{MODEL}"}}') == 10
    assert grew(f'cursor_byok_tokens_total{{kind="cache_read",model="{MODEL}"}}') == 60
    assert grew('cursor_byok_tool_round_trip_seconds_count{tool="Read"}') == 1
    assert grew(f'cursor_byok_provider_ttft_seconds_count{{model="{MODEL}"}}') == 2
    assert grew("cursor_byok_appends_total") >= 2  # the run request and the tool result
    assert "cursor_byok_runsse_streams_open" in after and "cursor_byok_active_conversations" in after

    # JSON log lines: every line of the run carries its ids, the retry's inside the provider call too.
    lines = [line for line in json_lines(server) if line.get("run_id") == run["run_id"]]
    ids = {"trace_id": run["trace_id"], "conversation_id": conversation_id, "run_id": run["run_id"], "request_id": request_id}
    for line in lines:
        assert {k: line.get(k) for k in ids} == ids, line
    retry = [line for line in lines if "retry 1/2" in line["msg"]]
    assert retry and all(line["trace_id"] == run["trace_id"] and line["request_id"] == request_id for line in retry)
    [finished] = [line for line in lines if line["msg"] == "run finished"]
    assert (finished["input_tokens"], finished["output_tokens"], finished["tool_calls"], finished["calls"]) == (160, 10, 1, 2)


async def test_the_api_key_is_in_no_record_metric_log_or_page(server: ServerProcess, provider: FakeProviderServer, workspace: Path) -> None:
    """Providers echo keys back (401 bodies, odd fields); the detailed mode keeps bodies. None of it
    may carry the key out."""
    echoed = OPENAI_CHAT.text(["fine"])
    echoed.chunks.insert(1, sse({"id": "x", "object": "chat.completion.chunk", "choices": [], "system_fingerprint": CANARY}))
    provider.enqueue(echoed, OPENAI_CHAT.auth_error(echo=CANARY))
    before = metrics(server)
    ide = ScriptedIDE(server.base_url, workspace)
    conversation_ids = [uuid.uuid4().hex, uuid.uuid4().hex]
    try:
        ok = await ide.turn(run_request("hello", model=MODEL, conversation_id=conversation_ids[0]))
        failed = await ide.turn(run_request("again", model=MODEL, conversation_id=conversation_ids[1]))
    finally:
        await ide.close()
    assert ok.terminal is None and failed.terminal is not None and failed.terminal.code == "unauthenticated"
    errors = 'cursor_byok_errors_total{code="unauthenticated"}'
    assert metrics(server).get(errors, 0.0) - before.get(errors, 0.0) == 1  # the failed run, counted once
    details = [wait_for(lambda c=c: ui(server, f"conversations/{c}"), lambda d: d["runs"] and d["runs"][0]["calls"]) for c in conversation_ids]
    bodies = [ui(server, f"calls/{call['trace_id']}/{call['seq']}/bodies") for d in details for call in d["runs"][0]["calls"]]
    assert "[REDACTED]" in bodies[0]["response"]  # the echo was there, and was scrubbed
    failed_call = details[1]["runs"][0]["calls"][0]
    assert (failed_call["error_kind"], failed_call["http_status"]) == ("auth", 401) and "[REDACTED]" in failed_call["error_message"]
    seen = {
        "api": json.dumps([details, bodies, ui(server, "overview"), ui(server, "conversations"), ui(server, "live"), ui(server, "models")]),
        "pages": "".join(httpx.get(f"{server.base_url}/ui/{page}", timeout=5).text for page in ("", "app.js", "style.css")),
        "metrics": httpx.get(f"{server.base_url}/metrics", timeout=5).text,
        "log": server.log_path.read_text(),
    }
    for name, text in seen.items():
        assert CANARY not in text, name
    data = b"".join(p.read_bytes() for p in server.config.data_dir.glob("state.db*"))
    assert CANARY.encode() not in data and b"[REDACTED]" in data


def test_usage_command_shows_the_dashboards_numbers(server: ServerProcess) -> None:
    """`cursor-byok usage` beside a running server: the same rows as the dashboard's API, as a table."""
    for by in ("model", "day"):
        api = ui(server, f"usage?since=7d&by={by}")
        assert api["rows"], "the turns of this module were recorded"
        done = server.run_to_exit("usage", "--since", "7d", "--by", by, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == api
    table = server.run_to_exit("usage", "--since", "7d")
    assert table.returncode == 0, table.stderr
    head, *rows = table.stdout.splitlines()
    assert head.split()[:3] == ["MODEL", "CALLS", "ERRORS"] and "CACHE HIT" in head and "COST" in head
    [model_row] = [r for r in rows if r.startswith(MODEL)]
    assert str(api_calls := ui(server, "usage?since=7d")["totals"]["calls"]) in model_row and "$" in model_row, (api_calls, rows)
    bad = server.run_to_exit("usage", "--since", "soon")
    assert bad.returncode == 2 and "not an age" in bad.stderr and "Traceback" not in bad.stderr


def test_a_refusal_at_the_edge_is_counted_by_its_connect_code(server: ServerProcess) -> None:
    name = 'cursor_byok_errors_total{code="invalid_argument"}'
    before = metrics(server).get(name, 0.0)
    resp = httpx.post(server.base_url + BIDI_APPEND, content=b"\xff not a protobuf", headers={"content-type": "application/proto"}, timeout=5)
    assert (resp.status_code, resp.json()["code"]) == (400, "invalid_argument")
    assert metrics(server)[name] - before == 1


async def test_a_run_in_progress_is_on_the_live_page_and_in_the_gauges(
    server: ServerProcess, provider: FakeProviderServer, workspace: Path
) -> None:
    """Held at its tool call, the run is live (its phase, calls and tokens so far), its conversation
    is active and its stream open; once it ends it is gone from all three."""
    (workspace / "notes.txt").write_text("remember the milk\n")
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("c1", "Read", [json.dumps({"path": str(workspace / "notes.txt")})])], usage=UsageSpec(input=30, output=4)),
        OPENAI_CHAT.text(["done"], usage=UsageSpec(input=40, output=2)),
    )
    conversation_id = uuid.uuid4().hex
    ide = ScriptedIDE(server.base_url, workspace)
    ide.hold_execs = True
    seen: dict[str, Any] = {}

    async def while_held(request_id: str, log: Any) -> None:
        deadline = time.monotonic() + 10
        while not ide.held and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        seen["live"] = ui(server, "live")
        seen["metrics"] = metrics(server)
        await ide.release_held()

    try:
        log = await ide.turn(run_request("read my notes", model=MODEL, conversation_id=conversation_id), during=while_held)
    finally:
        await ide.close()
    assert log.terminal is None and log.text == "done"
    [live] = [r for r in seen["live"]["runs"] if r["conversation_id"] == conversation_id]
    assert (live["model_id"], live["phase"], live["calls"], live["tool_calls"]) == (MODEL, "waiting_tools", 1, 0)
    assert (live["input_tokens"], live["output_tokens"], live["trace_id"] != "") == (30, 4, True)
    assert (seen["live"]["active_conversations"], seen["live"]["open_streams"]) == (1, 1)
    gauges = ("cursor_byok_active_conversations", "cursor_byok_runsse_streams_open")
    assert [seen["metrics"][g] for g in gauges] == [1, 1]
    after = wait_for(lambda: ui(server, "live"), lambda v: not v["runs"])
    assert (after["runs"], after["active_conversations"]) == ([], 0)
    assert metrics(server)["cursor_byok_active_conversations"] == 0


@pytest.mark.parametrize(("method", "path", "code", "says"), [
    ("GET", "conversations?cursor=garbage", "invalid_argument", "cursor"),
    ("GET", "conversations?limit=many", "invalid_argument", "limit"),
    ("GET", "overview?hours=soon", "invalid_argument", "hours"),
    ("GET", "usage?since=soon", "invalid_argument", "not an age"),
    ("GET", "usage?by=week", "invalid_argument", "by: model, day or user"),
    ("GET", "calls/nope/1/bodies", "not_found", "no call"),
    ("GET", "nothing", "not_found", "no API"),
    ("POST", "models/nope/test", "not_found", "no model"),
    ("DELETE", "overview", "unimplemented", "read with GET"),
])
def test_the_dashboard_api_answers_bad_input_with_a_connect_error(server: ServerProcess, method: str, path: str, code: str, says: str) -> None:
    """One line naming the parameter, with a Connect code like every refusal of this server."""
    resp = httpx.request(method, f"{server.base_url}/ui/api/{path}", headers={"content-type": "application/json"}, timeout=5)
    assert 400 <= resp.status_code < 500, resp.text
    error = resp.json()
    assert error["code"] == code and says in error["message"], error
    assert "\n" not in error["message"] and "invalid literal" not in error["message"], error
