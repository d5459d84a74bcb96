"""Connect and gRPC-Web protocol rules as clients written by others rely on them (issue 31, items
4, 5, 6, 8), through the real server over real HTTP: a streaming call's error is a 200 whose
stream ends in it, compressed requests on every route, the client's deadline bounds the call,
an encoding we do not speak is `unimplemented` (501), gRPC-Web beside Connect."""
from __future__ import annotations

import asyncio
import base64
import gzip
import uuid
from pathlib import Path

import httpx
import pytest

from cursor_byok import hotpath
from cursor_byok.protocol import agent_pb2 as pb, aiserver_pb2, decode_stream
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, Reply
from tests.harness.ide import (
    BIDI_APPEND,
    FLAG_GRPC_WEB_TRAILER,
    GRPC_WEB_PROTO,
    RUN_SSE,
    ScriptedIDE,
    StreamLog,
    append_body,
    appends_waiting,
    cancel_message,
    envelope,
    grpc_web_error,
    grpc_web_trailer,
    run_request,
)
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

from .conftest import MODEL

CONNECT_STREAM = {"content-type": "application/connect+proto"}


def frames(body: bytes) -> list[tuple[int, bytes]]:
    decoder = hotpath.FrameDecoder()
    out = decoder.feed(body)
    decoder.close()
    return out


def request_id_body(request_id: str) -> bytes:
    return pb.BidiRequestId(request_id=request_id).SerializeToString()


# -- item 4: a RunSSE refused while reading its request is a 200 stream ending in the error --------

RUNSSE_REFUSALS = [
    ("not protobuf", b"\xff\xfe garbage", {}, "invalid_argument"),
    ("empty request id", envelope(b""), {}, "invalid_argument"),
    ("unknown encoding", envelope(request_id_body("r1")), {"connect-content-encoding": "br"}, "unimplemented"),
]


@pytest.mark.parametrize(("name", "body", "headers", "code"), RUNSSE_REFUSALS, ids=[c[0] for c in RUNSSE_REFUSALS])
async def test_a_refused_runsse_request_is_a_200_stream_ending_in_its_error(
    server: ServerProcess, name: str, body: bytes, headers: dict[str, str], code: str
) -> None:
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        resp = await client.post(RUN_SSE, content=body, headers={**CONNECT_STREAM, **headers})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "text/event-stream"
    stream = decode_stream(resp.content)
    assert stream.messages == [] and stream.ended
    assert stream.error is not None and stream.error.code == code, stream.error


async def test_runsse_takes_a_gzip_compressed_request(server: ServerProcess, provider: FakeProviderServer, workspace: Path) -> None:
    provider.enqueue(OPENAI_CHAT.text(["zipped ", "request"]))
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        request_id = uuid.uuid4().hex
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(request_id, log, gzip_request=True))
        resp = await ide.append(request_id, run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
        assert resp.status_code == 200, resp.text
        await asyncio.wait_for(reader, 20)
    finally:
        await ide.close()
    assert log.terminal is None and log.text == "zipped request", log.terminal


# -- item 8: encodings and deadlines ------------------------------------------------------------------

async def test_an_unknown_content_encoding_is_unimplemented_with_its_http_status(server: ServerProcess) -> None:
    body = append_body("r-br", 0, run_request("hi", model=MODEL, conversation_id=None))
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        resp = await client.post(BIDI_APPEND, content=body, headers={"content-type": "application/proto", "content-encoding": "br"})
    assert (resp.status_code, resp.json()["code"]) == (501, "unimplemented"), resp.text
    assert "gzip" in resp.headers["accept-encoding"]


async def test_a_held_append_ends_at_its_connect_timeout(server: ServerProcess) -> None:
    """A later append waits for its seqno 0 (here up to runsse_wait_seconds); the client's deadline
    is shorter and ends the wait with deadline_exceeded."""
    settings = server.settings()
    timeout_ms = int(settings.server.runsse_wait_seconds * 1000) // 5
    body = append_body(uuid.uuid4().hex, 1, cancel_message())
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        resp = await client.post(BIDI_APPEND, content=body, headers={"content-type": "application/proto", "connect-timeout-ms": str(timeout_ms)})
    assert (resp.status_code, resp.json()["code"]) == (504, "deadline_exceeded"), resp.text


async def test_a_held_append_whose_client_left_is_canceled_at_once(tmp_path: Path) -> None:
    """A later append waits for its seqno 0 (here up to 30 s); its client leaving ends the wait
    then, as `canceled`, and nothing stays parked."""
    config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id=MODEL, provider="openai-chat", base_url="http://127.0.0.1:9/v1")], runsse_wait_seconds=30.0)
    with ServerProcess(config) as server:
        async with httpx.AsyncClient(base_url=server.base_url) as probe:
            leaving = httpx.AsyncClient(base_url=server.base_url)
            held = asyncio.create_task(
                leaving.post(BIDI_APPEND, content=append_body(uuid.uuid4().hex, 1, cancel_message()), headers={"content-type": "application/proto"})
            )
            await appends_waiting(probe, 1)
            held.cancel()
            await leaving.aclose()
            await appends_waiting(probe, 0, timeout=10.0)
            assert 'cursor_byok_errors_total{code="canceled"} 1.0' in (await probe.get("/metrics")).text


async def test_a_runsse_ends_at_its_connect_timeout(server: ServerProcess, provider: FakeProviderServer, workspace: Path) -> None:
    """The model stalls mid-answer; the RunSSE's deadline ends the stream with deadline_exceeded."""
    provider.enqueue(Reply(chunks=OPENAI_CHAT.text(["first ", "never"]).chunks, stall_after=1))
    ide = ScriptedIDE(server.base_url, workspace)
    request_id = uuid.uuid4().hex
    try:
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(request_id, log, headers={"connect-timeout-ms": "800"}))
        await ide.append(request_id, run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
        await asyncio.wait_for(reader, 20)
        assert log.terminal is not None and log.terminal.code == "deadline_exceeded", log.terminal
        await ide.append(request_id, cancel_message())
    finally:
        provider._release.set()
        await ide.close()


async def test_a_run_stream_ends_at_its_connect_timeout(server: ServerProcess, provider: FakeProviderServer, workspace: Path) -> None:
    """The same on HTTP/2 `Run`: the deadline ends the stream with deadline_exceeded."""
    provider.enqueue(Reply(chunks=OPENAI_CHAT.text(["first ", "never"]).chunks, stall_after=1))
    ide = ScriptedIDE(server.base_url, workspace, transport="run")
    request_id = uuid.uuid4().hex
    try:
        log = StreamLog()
        reader = asyncio.create_task(ide.stream(request_id, log))
        await ide.append(request_id, run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex), headers={"connect-timeout-ms": "800"})
        await asyncio.wait_for(reader, 20)
        assert log.terminal is not None and log.terminal.code == "deadline_exceeded", log.terminal
    finally:
        provider._release.set()
        await ide.close()


# -- item 5: the server's retries are spent: the error says so ---------------------------------------

async def test_a_provider_error_says_it_is_not_to_be_retried(server: ServerProcess, provider: FakeProviderServer, ide: ScriptedIDE) -> None:
    provider.respond_with(lambda request: Reply(status=503, body=b'{"error": {"message": "overloaded"}}', content_type="application/json"))
    log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
    assert log.terminal is not None and log.terminal.code == "unavailable", log.terminal
    [details] = log.terminal.details
    assert details.error == aiserver_pb2.ErrorDetails.Error.ERROR_PROVIDER_ERROR
    assert details.is_retryable is False
    assert len(provider.requests) > 1  # the server retried before giving up


async def test_a_rejected_key_is_the_user_api_key_error(server: ServerProcess, provider: FakeProviderServer, ide: ScriptedIDE) -> None:
    """Cursor's clients send the user to their key settings for ERROR_BAD_USER_API_KEY (and never
    retry it); for `unauthenticated` alone they ask the user to log in to Cursor."""
    provider.enqueue(OPENAI_CHAT.auth_error())
    log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
    assert log.terminal is not None and log.terminal.code == "unauthenticated", log.terminal
    [details] = log.terminal.details
    assert (details.error, details.is_retryable) == (aiserver_pb2.ErrorDetails.Error.ERROR_BAD_USER_API_KEY, False)


# -- item 6: gRPC-Web -----------------------------------------------------------------------------

async def test_grpc_web_text_turn(server: ServerProcess, provider: FakeProviderServer, workspace: Path) -> None:
    provider.enqueue(OPENAI_CHAT.text(["hello ", "web"]))
    ide = ScriptedIDE(server.base_url, workspace, grpc_web=True)
    try:
        log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
    finally:
        await ide.close()
    assert log.text == "hello web" and log.terminals == 1
    assert log.trailer == {"grpc-status": "0"}
    assert frames(bytes(log.raw))[-1][0] == FLAG_GRPC_WEB_TRAILER


async def test_grpc_web_tool_round_trip_and_kv_acks(server: ServerProcess, provider: FakeProviderServer, workspace: Path) -> None:
    (workspace / "note.txt").write_text("grpc-web was here\n")
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("c_read", "Read", ['{"path": "%s"}' % (workspace / "note.txt")])]),
        OPENAI_CHAT.text(["read it"]),
    )
    ide = ScriptedIDE(server.base_url, workspace, grpc_web=True)
    try:
        log = await ide.turn(run_request("read", model=MODEL, conversation_id=uuid.uuid4().hex, workspace=str(workspace)))
    finally:
        await ide.close()
    assert log.terminal is None and log.text == "read it", log.terminal
    assert [e.WhichOneof("message") for e in ide.exec_log] == ["read_args"]
    tool_results = [m for m in provider.requests[1].json()["messages"] if m["role"] == "tool"]
    assert "grpc-web was here" in tool_results[0]["content"]
    assert any(kv.WhichOneof("message") == "set_blob_args" for kv in ide.kv_log)  # acked by gRPC-Web appends


async def test_a_refused_grpc_web_append_is_a_200_with_the_trailer_alone(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        ok = await client.post(BIDI_APPEND, content=envelope(b"\xff\xff"), headers={"content-type": GRPC_WEB_PROTO})
        gz = await client.post(
            BIDI_APPEND, content=envelope(gzip.compress(b"\xff\xff"), 1), headers={"content-type": "application/grpc-web", "grpc-encoding": "gzip"}
        )
    for resp in (ok, gz):
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("application/grpc-web"), resp.text
        [(flags, payload)] = frames(resp.content)
        assert flags == FLAG_GRPC_WEB_TRAILER
        error = grpc_web_error(grpc_web_trailer(payload))
        assert error is not None and error.code == "invalid_argument", payload


async def test_grpc_web_accepted_append_and_errors_in_trailers(server: ServerProcess, provider: FakeProviderServer) -> None:
    provider.enqueue(Reply(status=400, body=b'{"error": {"message": "no such thing"}}', content_type="application/json"))
    request_id = uuid.uuid4().hex
    async with httpx.AsyncClient(base_url=server.base_url, timeout=20) as client:
        stream = asyncio.create_task(
            client.post(RUN_SSE, content=envelope(request_id_body(request_id)), headers={"content-type": GRPC_WEB_PROTO})
        )
        body = envelope(append_body(request_id, 0, run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex)))
        append = await client.post(BIDI_APPEND, content=body, headers={"content-type": GRPC_WEB_PROTO})
        streamed = await asyncio.wait_for(stream, 20)
    # The accepted append: one (empty) BidiAppendResponse, then grpc-status 0.
    assert append.status_code == 200 and append.headers["content-type"] == GRPC_WEB_PROTO
    assert [(f, p) for f, p in frames(append.content)] == [(0, b""), (FLAG_GRPC_WEB_TRAILER, b"grpc-status: 0\r\n")]
    # The run's provider error: the stream's trailer frame, code, message and Cursor's details.
    assert streamed.status_code == 200 and streamed.headers["content-type"] == GRPC_WEB_PROTO
    flags, payload = frames(streamed.content)[-1]
    trailer = grpc_web_trailer(payload)
    assert flags == FLAG_GRPC_WEB_TRAILER and trailer["grpc-status"] != "0", trailer
    status = google_rpc_status(base64.b64decode(trailer["grpc-status-details-bin"] + "=="))
    assert status["code"] == int(trailer["grpc-status"])
    assert status["details"][0][0] == "type.googleapis.com/aiserver.v1.ErrorDetails"
    details = aiserver_pb2.ErrorDetails.FromString(status["details"][0][1])
    assert details.error == aiserver_pb2.ErrorDetails.Error.ERROR_PROVIDER_ERROR


def google_rpc_status(data: bytes) -> dict:
    """google.rpc.Status {1: code, 2: message, 3: repeated Any {1: type_url, 2: value}}, read with
    protobuf's own descriptor machinery (no generated module for it ships with protobuf)."""
    from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(name="test_status.proto", package="testrpc", dependency=["google/protobuf/any.proto"])
    msg = fdp.message_type.add(name="Status")
    msg.field.add(name="code", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32, label=1)
    msg.field.add(name="message", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    msg.field.add(name="details", number=3, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE, label=3, type_name=".google.protobuf.Any")
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(any_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(fdp)
    status = message_factory.GetMessageClass(pool.FindMessageTypeByName("testrpc.Status")).FromString(data)
    return {"code": status.code, "message": status.message, "details": [(d.type_url, d.value) for d in status.details]}
