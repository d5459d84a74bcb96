"""Bad input over real HTTP: each gets a specific Connect error, never a 500 or a traceback."""
from __future__ import annotations

import asyncio
import gzip
import uuid

import httpx
import pytest

from cursor_byok.protocol import agent_pb2 as pb, aiserver_pb2, decode_stream
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import BIDI_APPEND, RUN_SSE, ScriptedIDE, StreamLog, append_body, envelope, run_request
from tests.harness.server import ServerProcess

from .conftest import MODEL


PROTO = {"content-type": "application/proto"}


def bidi(data: str = "", *, rid: str = "r", seqno: int = 0, binary: bytes = b"") -> bytes:
    req = aiserver_pb2.BidiAppendRequest(data=data, append_seqno=seqno, data_binary=binary)
    req.request_id.request_id = rid
    return req.SerializeToString()


CASES = [
    ("body not protobuf", b"\xff\xff\xff\xff not protobuf", {}, 400, "invalid_argument"),
    ("hex of odd length", bidi("abc"), {}, 400, "invalid_argument"),
    ("non-hex bytes", bidi("zz"), {}, 400, "invalid_argument"),
    ("empty data", bidi(""), {}, 400, "invalid_argument"),
    ("missing request id", bidi("0a00", rid=""), {}, 400, "invalid_argument"),
    ("frame longer than the cap", b"\x00" + (64 * 1024 * 1024).to_bytes(4, "big") + b"x", {}, 429, "resource_exhausted"),
    ("truncated frame", b"\x00\x00\x00\x00\x10" + b"abc", {}, 400, "invalid_argument"),
    ("gzip flag without gzip encoding", b"\x01\x00\x00\x00\x03abc", {}, 400, "invalid_argument"),
    ("corrupt gzip", b"\x1f\x8b\x08\x00garbage", {"content-encoding": "gzip"}, 400, "invalid_argument"),
    ("unknown content encoding", bidi("0a00"), {"content-encoding": "br"}, 501, "unimplemented"),
    ("first append without a model", bidi(pb.AgentClientMessage(client_heartbeat=pb.ClientHeartbeat()).SerializeToString().hex()), {}, 400, "invalid_argument"),
    ("one parent header alone", bidi("0a00"), {"x-parent-request-id": "p"}, 400, "invalid_argument"),
]


@pytest.mark.parametrize(("name", "body", "headers", "status", "code"), CASES, ids=[c[0] for c in CASES])
async def test_bidi_append_bad_input(server: ServerProcess, name: str, body: bytes, headers: dict[str, str], status: int, code: str) -> None:
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        resp = await client.post(BIDI_APPEND, content=body, headers={"content-type": "application/proto", **headers})
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/json"
    assert resp.json()["code"] == code
    assert "Traceback" not in resp.text


async def test_runsse_bad_input(server: ServerProcess) -> None:
    """A streaming call's error is a 200 whose stream ends in it (a client ignores the body of a
    non-200 stream)."""
    async with httpx.AsyncClient(base_url=server.base_url, headers=PROTO) as client:
        for body in (b"\xff\xfe garbage", envelope(b"")):  # not protobuf; an empty request id
            resp = await client.post(RUN_SSE, content=body)
            stream = decode_stream(resp.content)
            assert resp.status_code == 200 and stream.error is not None and stream.error.code == "invalid_argument"


async def test_gzip_encoded_append_is_accepted(server: ServerProcess, provider: FakeProviderServer, workspace) -> None:
    provider.enqueue(OPENAI_CHAT.text(["zipped"]))
    rid = uuid.uuid4().hex
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(rid, log))
        body = gzip.compress(append_body(rid, 0, run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex)))
        resp = await ide.client.post(BIDI_APPEND, content=body, headers={"content-encoding": "gzip", **PROTO})
        assert resp.status_code == 200, resp.text
        ide.seqnos[rid] = 1
        await asyncio.wait_for(reader, 15)
    finally:
        await ide.close()
    assert log.text == "zipped"


async def test_unknown_client_message_variant_is_kept_not_crashed_on(server: ServerProcess, provider: FakeProviderServer, workspace) -> None:
    provider.enqueue(OPENAI_CHAT.text(["still fine"]))
    rid = uuid.uuid4().hex
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(rid, log))
        await ide.append(rid, run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
        # field 99 of AgentClientMessage: a variant from a newer client
        resp = await ide.append_raw(rid, bytes([0x9A, 0x06, 0x02, 0x08, 0x01]))
        assert resp.status_code == 200, resp.text
        await asyncio.wait_for(reader, 15)
    finally:
        await ide.close()
    assert log.text == "still fine" and log.terminal is None


async def test_body_over_the_size_limit_is_refused(server: ServerProcess) -> None:
    """Refused from its declared length (413, issue 33) and answered while the client still sends:
    the client reads the refusal, not a reset."""
    async with httpx.AsyncClient(base_url=server.base_url, headers=PROTO) as client:
        resp = await client.post(BIDI_APPEND, content=b"\x0a" * (33 * 1024 * 1024))
    assert resp.status_code == 413 and resp.json()["code"] == "resource_exhausted"


async def test_h2c_prior_knowledge_is_served(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, http1=False, http2=True, headers=PROTO) as client:
        resp = await client.get("/__byok-api__/healthz")
        assert resp.status_code == 204 and resp.http_version == "HTTP/2"
        resp = await client.post(BIDI_APPEND, content=bidi("abc"))
        assert resp.status_code == 400 and resp.http_version == "HTTP/2"
