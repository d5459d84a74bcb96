"""Input hygiene at the edge: identifiers, slow or endless bodies, oversized heads, slow clients."""
from __future__ import annotations

import asyncio
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cursor_byok.protocol import agent_pb2 as pb, decode_stream
from tests.harness.ide import BIDI_APPEND, RUN_SSE, ScriptedIDE, append_body, envelope, heartbeat_message, run_request
from tests.harness.server import ServerProcess

from .edge_support import PROTO, edge_config, provider_and_upstream, open_fds, raw_http, server_processes

MODEL = "byok-hygiene"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with provider_and_upstream() as (provider, upstream):
        cfg = edge_config(
            tmp_path_factory.mktemp("hygiene"),
            MODEL,
            provider,
            upstream,  # answers whatever reaches it
            runsse_wait_seconds=1.0,
            extra_server={"body_read_timeout_seconds": 1.0, "header_read_timeout_seconds": 1.0},
        )
        with ServerProcess(cfg) as proc:
            yield proc


def stored_conversations(server: ServerProcess) -> list[str]:
    db = sqlite3.connect(f"file:{server.config.data_dir / 'state.db'}?mode=ro", uri=True)
    try:
        return [row[0] for row in db.execute("select conversation_id from conversations")]
    finally:
        db.close()


@pytest.mark.parametrize(
    ("conversation_id", "request_id"),
    [("a\x00b", None), ("line\nbreak", None), ("c" * (4 << 20), None), ("ok", "r" * (1 << 20)), ("ok", "tab\there")],
    ids=["nul-conversation", "newline-conversation", "4MiB-conversation", "1MiB-request", "tab-request"],
)
async def test_bad_identifiers_are_refused_before_anything_is_stored(server: ServerProcess, conversation_id: str, request_id: str | None) -> None:
    before = stored_conversations(server)
    rid = request_id or uuid.uuid4().hex
    body = append_body(rid, 0, run_request("hi", model=MODEL, conversation_id=conversation_id))
    async with httpx.AsyncClient(base_url=server.base_url, headers=PROTO) as client:
        resp = await client.post(BIDI_APPEND, content=body)
    assert (resp.status_code, resp.json()["code"]) == (400, "invalid_argument")
    message = resp.json()["message"]
    assert message.startswith("protocol error: ") and ("conversation_id" in message or "request_id" in message)
    assert len(message) < 200 and "\x00" not in message  # the id is named, never echoed
    assert stored_conversations(server) == before
    assert "WriteFailedError" not in server.log() and "KeyError" not in server.log()


async def test_bad_ids_in_later_messages_and_headers(server: ServerProcess, workspace: Path) -> None:
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        rid = uuid.uuid4().hex
        log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex), request_id=rid)
        assert log.text == "fine"
        inject = pb.AgentClientMessage()
        inject.conversation_action.inject_context_action.injection_id = "x\x07"
        resp = await ide.append(rid, inject)
        assert (resp.status_code, resp.json()["code"]) == (400, "invalid_argument")
        resp = await ide.append(uuid.uuid4().hex, heartbeat_message(), headers={"x-parent-request-id": "p" * 300, "x-parent-agent-tool-call-id": "t"})
        assert (resp.status_code, resp.json()["code"]) == (400, "invalid_argument")
        runsse = envelope(pb.BidiRequestId(request_id="q" * 300).SerializeToString())
        resp = await ide.client.post(RUN_SSE, content=runsse, headers={"content-type": "application/connect+proto"})
        ended = decode_stream(resp.content)  # a stream's error: 200, in its end-stream frame
        assert resp.status_code == 200 and ended.error is not None and ended.error.code == "invalid_argument"
    finally:
        await ide.close()


@pytest.mark.parametrize("path", [BIDI_APPEND, RUN_SSE, "/aiserver.v1.AiService/Passthrough", "/agent.v1.AgentService/GetUsableModels"])
async def test_a_stalled_body_is_answered_408_and_the_connection_closed(server: ServerProcess, path: str) -> None:
    head = f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{server.port}\r\ncontent-type: application/proto\r\ncontent-length: 100\r\n\r\n"
    started = time.monotonic()
    # close_wait: on a loaded machine the close can come later than a second after the answer
    resp = await asyncio.to_thread(raw_http, server.port, head.encode() + b"0123456789", timeout=20, close_wait=10)
    assert resp.status == 408 and b"deadline_exceeded" in resp.body, resp
    assert resp.closed
    assert time.monotonic() - started < 15  # bounded by the configured 1 s, not held forever


async def test_oversized_heads_are_refused_by_the_http_layer(server: ServerProcess) -> None:
    base = f"POST {BIDI_APPEND} HTTP/1.1\r\nhost: 127.0.0.1:{server.port}\r\ncontent-type: application/proto\r\n"
    many = base + "".join(f"x-h{i}: v\r\n" for i in range(150)) + "content-length: 0\r\n\r\n"
    resp = await asyncio.to_thread(raw_http, server.port, many.encode())
    assert resp.status == 431
    big = base + "x-big: " + "a" * (200 * 1024) + "\r\ncontent-length: 0\r\n\r\n"
    resp = await asyncio.to_thread(raw_http, server.port, big.encode())
    assert resp.status == 431


async def test_slow_clients_do_not_pin_file_descriptors(server: ServerProcess) -> None:
    worker = server_processes(server)[-1]
    before = open_fds(worker)
    socks = []
    try:
        for i in range(200):
            s = socket.create_connection(("127.0.0.1", server.port))
            if i % 2:  # half stop inside the head, half inside the body
                s.sendall(f"POST {BIDI_APPEND} HTTP/1.1\r\nhost: 127.0.0.1:{server.port}\r\n".encode())
            else:
                s.sendall(f"POST {BIDI_APPEND} HTTP/1.1\r\nhost: 127.0.0.1:{server.port}\r\ncontent-type: application/proto\r\ncontent-length: 50\r\n\r\nxx".encode())
            socks.append(s)
        await asyncio.sleep(0.5)
        held = open_fds(worker)
        closed = 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and closed < len(socks):
            await asyncio.sleep(0.5)
            closed = 0
            for s in socks:
                s.setblocking(False)
                try:
                    closed += s.recv(65536, socket.MSG_PEEK) is not None and _drained_to_eof(s)
                except BlockingIOError:
                    pass
                except OSError:
                    closed += 1
        assert closed == len(socks), f"{closed} of {len(socks)} slow connections closed by the server"
        after = open_fds(worker)
        print(f"\nworker fds: before {before}, with 200 slow clients {held}, after their timeouts {after}")
        assert after <= before + 5
    finally:
        for s in socks:
            s.close()


def _drained_to_eof(sock: socket.socket) -> bool:
    """True once the server closed its side (after any answer it sent)."""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True
    except BlockingIOError:
        return False
