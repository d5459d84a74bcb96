"""What the edge checks cost per request: the request guard on an IDE-shaped request, and the
identifier checks inside BidiAppend decoding. Ratios against the decode alone, measured in one run.

    .venv/bin/python -m pytest -q benchmarks/test_guard.py --benchmark-columns=min,median,mean,ops -s
"""
from __future__ import annotations

import time
import uuid

import pytest

from cursor_byok.config import parse
from cursor_byok.gateway.guard import PROTO_TYPES, RequestGuard
from cursor_byok.protocol import agent_pb2, aiserver_pb2, decode_bidi_append
from cursor_byok.protocol.ids import check_client_message_ids

N = 100_000
IDE_HEADERS = [
    (b"host", b"api2.cursor.sh"),
    (b"content-type", b"application/proto"),
    (b"connect-protocol-version", b"1"),
    (b"authorization", b"Bearer " + b"x" * 600),
    (b"x-request-id", str(uuid.uuid4()).encode()),
    (b"x-cursor-client-version", b"3.14.27"),
    (b"x-cursor-checksum", b"y" * 80),
    (b"x-ghost-mode", b"true"),
    (b"x-cursor-streaming", b"true"),
    (b"user-agent", b"connect-es/1.6.1"),
    (b"x-server-upstream-url", b"https://api2.cursor.sh/aiserver.v1.BidiService/BidiAppend"),
    (b"x-cursor-byok-proxy", b"secret-mark-0123456789"),
    (b"content-length", b"120"),
]


def _run_request_append() -> bytes:
    msg = agent_pb2.AgentClientMessage()
    rr = msg.run_request
    rr.conversation_id = str(uuid.uuid4())
    rr.run_id = str(uuid.uuid4())
    rr.requested_model.model_id = "byok-sonnet"
    rr.action.user_message_action.user_message.text = "fix the failing test"
    rr.action.user_message_action.user_message.message_id = str(uuid.uuid4())
    req = aiserver_pb2.BidiAppendRequest(data=msg.SerializeToString().hex(), append_seqno=0)
    req.request_id.request_id = str(uuid.uuid4())
    return req.SerializeToString()


@pytest.mark.benchmark(group="edge")
def test_guard_check_per_request(benchmark) -> None:
    guard = RequestGuard(parse({"server": {"port": 8787}}), proxy_secret="secret-mark-0123456789", auth_token="")
    scope = {"method": "POST", "path": "/aiserver.v1.BidiService/BidiAppend", "headers": IDE_HEADERS}

    def run() -> None:
        check = guard.check
        for _ in range(N):
            assert check(scope, PROTO_TYPES) is None

    benchmark.pedantic(run, rounds=5, iterations=1)
    per_request_us = benchmark.stats.stats.median / N * 1e6
    benchmark.extra_info["us_per_request"] = round(per_request_us, 3)
    print(f"\nguard.check: {per_request_us:.2f} µs per request ({len(IDE_HEADERS)} headers)")


def _exec_result_append() -> bytes:
    msg = agent_pb2.AgentClientMessage()
    msg.exec_client_message.id = 12
    msg.exec_client_message.exec_id = "call_01HZX3A9B7"
    msg.exec_client_message.shell_stream.stdout.data = "collected 118 items\n"
    req = aiserver_pb2.BidiAppendRequest(data=msg.SerializeToString().hex(), append_seqno=7)
    req.request_id.request_id = str(uuid.uuid4())
    return req.SerializeToString()


@pytest.mark.parametrize("kind", ["exec_result", "run_request"])
@pytest.mark.benchmark(group="edge")
def test_id_checks_against_the_decode(benchmark, kind: str) -> None:
    body = _exec_result_append() if kind == "exec_result" else _run_request_append()
    append = decode_bidi_append(body)

    def run() -> None:
        for _ in range(N):
            check_client_message_ids(append.message, append.variant)

    benchmark.pedantic(run, rounds=5, iterations=1)
    ids_us = benchmark.stats.stats.median / N * 1e6
    started = time.perf_counter()
    for _ in range(N):
        decode_bidi_append(body)
    decode_us = (time.perf_counter() - started) / N * 1e6
    benchmark.extra_info.update({"ids_us": round(ids_us, 3), "decode_us": round(decode_us, 3)})
    print(f"\n{kind}: id checks {ids_us:.2f} µs of a {decode_us:.2f} µs decode ({ids_us / decode_us:.0%})")


def _team_guard(tmp_path, developers: int) -> tuple[RequestGuard, str]:
    """A team server's guard over `developers` developers in a real store; one of their tokens."""
    import asyncio

    from cursor_byok.store import DeveloperRecord, Store
    from cursor_byok.team import TeamAccess, new_token, token_digest

    config = parse({"server": {"port": 8787}, "team": {"enabled": True}})
    tokens = [new_token() for _ in range(developers)]

    async def load() -> TeamAccess:
        store = await Store.open(tmp_path / "state.db")
        try:
            for i, token in enumerate(tokens):
                await store.add_developer(DeveloperRecord(name=f"dev{i}", token_sha256=token_digest(token.encode()), created_at_ms=i))
            team = TeamAccess(config, store)
            await team.refresh()
            return team
        finally:
            await store.close()

    guard = RequestGuard(config, proxy_secret="secret-mark-0123456789", auth_token="")
    guard.team = asyncio.run(load())
    return guard, tokens[-1]


@pytest.mark.parametrize("mode", ["server_token", "team_100_developers"])
@pytest.mark.benchmark(group="edge-token")
def test_guard_check_with_a_token(benchmark, tmp_path, mode: str) -> None:
    """The guard on an IDE-shaped request carrying our token: the single-user server's auth token
    (a constant-time compare) against a team server's developer token (a SHA-256 and a dict read)."""
    if mode == "server_token":
        token = "t" * 43
        guard = RequestGuard(parse({"server": {"port": 8787}}), proxy_secret="secret-mark-0123456789", auth_token=token)
    else:
        guard, token = _team_guard(tmp_path, 100)
    headers = [*IDE_HEADERS, (b"x-cursor-byok-token", token.encode())]

    def run() -> None:
        check = guard.check
        for _ in range(N):
            scope = {"method": "POST", "path": "/aiserver.v1.BidiService/BidiAppend", "headers": headers}
            assert check(scope, PROTO_TYPES) is None

    benchmark.pedantic(run, rounds=5, iterations=1)
    per_request_us = benchmark.stats.stats.median / N * 1e6
    benchmark.extra_info["us_per_request"] = round(per_request_us, 3)
    print(f"\nguard.check with a token ({mode}): {per_request_us:.2f} µs per request")
