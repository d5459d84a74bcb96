"""Buf's Python Connect runtime (`connectrpc`) as a client nobody here wrote: unary side RPCs in
both codecs, BidiAppend over Connect (gzip, as that client compresses every request by default)
and over gRPC-Web, RunSSE over gRPC-Web (stock Connect clients refuse RunSSE's `text/event-stream`
answer, which Cursor's own patched client expects), errors with their details, deadlines.

The project's messages are google.protobuf classes; the client's codecs are for its own protobuf
runtime, so two small codecs hand it ours (its codec interface is three methods)."""
from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from connectrpc.client import ConnectClient
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.method import IdempotencyLevel, MethodInfo, StreamType
from connectrpc.protocol import ProtocolType
from google.protobuf import empty_pb2, json_format, struct_pb2
from google.protobuf.message import Message

from cursor_byok.protocol import agent_pb2 as pb, aiserver_pb2, side_pb2
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, Reply
from tests.harness.ide import cancel_message, run_request
from tests.harness.server import ServerProcess

from ..conftest import MODEL


class ProtoCodec:
    def name(self) -> str:
        return "proto"

    def encode(self, message: Message) -> bytes:
        return message.SerializeToString()

    def decode(self, data: bytes | bytearray, message_class: type[Message]) -> Message:
        return message_class.FromString(bytes(data))


class JsonCodec:
    def name(self) -> str:
        return "json"

    def encode(self, message: Message) -> bytes:
        return json_format.MessageToJson(message).encode()

    def decode(self, data: bytes | bytearray, message_class: type[Message]) -> Message:
        return json_format.Parse(bytes(data), message_class(), ignore_unknown_fields=True)


def method(service: str, name: str, request: type[Message], response: type[Message], stream: StreamType = StreamType.UNARY) -> MethodInfo:
    return MethodInfo(
        name=name, service_name=service, input=request, output=response, idempotency_level=IdempotencyLevel.UNKNOWN, stream_type=stream
    )


BIDI_APPEND = method("aiserver.v1.BidiService", "BidiAppend", aiserver_pb2.BidiAppendRequest, aiserver_pb2.BidiAppendResponse)
RUN_SSE = method("agent.v1.AgentService", "RunSSE", pb.BidiRequestId, pb.AgentServerMessage, StreamType.SERVER_STREAM)
IS_CONNECTED = method("aiserver.v1.NetworkService", "IsConnected", empty_pb2.Empty, empty_pb2.Empty)
DEFAULT_MODEL_FOR_CLI = method("agent.v1.AgentService", "GetDefaultModelForCli", side_pb2.GetDefaultModelForCliRequest, side_pb2.GetDefaultModelForCliResponse)
USABLE_MODELS = method("agent.v1.AgentService", "GetUsableModels", side_pb2.GetUsableModelsRequest, side_pb2.GetUsableModelsResponse)
TRACK_EVENTS = method("aiserver.v1.AnalyticsService", "TrackEvents", struct_pb2.Struct, struct_pb2.Struct)


def append_request(request_id: str, seqno: int, message: pb.AgentClientMessage) -> aiserver_pb2.BidiAppendRequest:
    req = aiserver_pb2.BidiAppendRequest(data=message.SerializeToString().hex(), append_seqno=seqno)
    req.request_id.request_id = request_id
    return req


class Agent:
    """RunSSE + BidiAppend through connectrpc: appends over `appends`, the stream over gRPC-Web;
    KV blobs acked and Read executed as the IDE does."""

    def __init__(self, appends: ConnectClient, stream: ConnectClient, workspace: Path) -> None:
        self.appends = appends
        self.stream = stream
        self.workspace = workspace
        self.seqno = 0
        self.messages: list[pb.AgentServerMessage] = []

    async def append(self, request_id: str, message: pb.AgentClientMessage) -> None:
        seqno, self.seqno = self.seqno, self.seqno + 1
        await self.appends.execute_unary(request=append_request(request_id, seqno, message), method=BIDI_APPEND)

    async def turn(self, text: str, *, timeout_ms: int | None = None) -> str:
        request_id = uuid.uuid4().hex
        reading = self._read(request_id, timeout_ms)
        first = asyncio.ensure_future(reading.__anext__())
        await self.append(request_id, run_request(text, model=MODEL, conversation_id=uuid.uuid4().hex, workspace=str(self.workspace)))
        out = []
        message: pb.AgentServerMessage | None = await first
        while message is not None:
            out.append(message)
            message = await anext(reading, None)
        self.messages = out
        return "".join(m.interaction_update.text_delta.text for m in out if m.interaction_update.HasField("text_delta"))

    async def _read(self, request_id: str, timeout_ms: int | None) -> AsyncIterator[pb.AgentServerMessage]:
        async for message in self.stream.execute_server_stream(request=pb.BidiRequestId(request_id=request_id), method=RUN_SSE, timeout_ms=timeout_ms):
            await self._react(request_id, message)
            yield message

    async def _react(self, request_id: str, message: pb.AgentServerMessage) -> None:
        reply = pb.AgentClientMessage()
        if message.kv_server_message.HasField("set_blob_args"):
            reply.kv_client_message.id = message.kv_server_message.id
            reply.kv_client_message.set_blob_result.SetInParent()
        elif message.exec_server_message.HasField("read_args"):
            ex = message.exec_server_message
            reply.exec_client_message.id = ex.id
            reply.exec_client_message.exec_id = ex.exec_id
            reply.exec_client_message.read_result.success.content = Path(ex.read_args.path).read_text()
        else:
            return
        await self.append(request_id, reply)


@pytest.fixture(params=[ProtocolType.CONNECT, ProtocolType.GRPC_WEB], ids=["connect-appends", "grpc-web-appends"])
async def agent(request: pytest.FixtureRequest, server: ServerProcess, workspace: Path) -> AsyncIterator[Agent]:
    async with (
        ConnectClient(server.base_url, codec=ProtoCodec(), protocol=request.param) as appends,  # gzip requests: the default
        ConnectClient(server.base_url, codec=ProtoCodec(), protocol=ProtocolType.GRPC_WEB) as stream,
    ):
        yield Agent(appends, stream, workspace)


async def test_a_text_turn(agent: Agent, provider: FakeProviderServer) -> None:
    provider.enqueue(OPENAI_CHAT.text(["from ", "connectrpc"]))
    assert await agent.turn("hi") == "from connectrpc"


async def test_a_tool_round_trip_with_kv_acks(agent: Agent, provider: FakeProviderServer, workspace: Path) -> None:
    (workspace / "a.txt").write_text("read by a Buf client\n")
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("c1", "Read", [json.dumps({"path": str(workspace / "a.txt")})])]), OPENAI_CHAT.text(["done"])
    )
    assert await agent.turn("read a.txt") == "done"
    assert "read by a Buf client" in [m for m in provider.requests[1].json()["messages"] if m["role"] == "tool"][0]["content"]
    assert any(m.kv_server_message.HasField("set_blob_args") for m in agent.messages)


async def test_a_provider_error_with_cursors_details(agent: Agent, provider: FakeProviderServer) -> None:
    provider.enqueue(Reply(status=400, body=b'{"error": {"message": "bad request"}}', content_type="application/json"))
    with pytest.raises(ConnectError) as raised:
        await agent.turn("hi")
    assert raised.value.code is Code.UNAVAILABLE
    [detail] = raised.value.details
    assert detail.type_name == "aiserver.v1.ErrorDetails"
    details = aiserver_pb2.ErrorDetails.FromString(detail.message_bytes)
    assert details.error == aiserver_pb2.ErrorDetails.Error.ERROR_PROVIDER_ERROR and not details.details.is_retryable


async def test_a_stream_deadline(agent: Agent, provider: FakeProviderServer) -> None:
    provider.enqueue(Reply(chunks=OPENAI_CHAT.text(["first ", "never"]).chunks, stall_after=1))
    try:
        with pytest.raises(ConnectError) as raised:
            await agent.turn("hi", timeout_ms=800)
        assert raised.value.code is Code.DEADLINE_EXCEEDED
    finally:
        provider._release.set()


@pytest.mark.parametrize("protocol", [ProtocolType.CONNECT, ProtocolType.GRPC_WEB])
async def test_a_held_append_deadline(server: ServerProcess, protocol: ProtocolType) -> None:
    async with ConnectClient(server.base_url, codec=ProtoCodec(), protocol=protocol) as client:
        with pytest.raises(ConnectError) as raised:
            await client.execute_unary(request=append_request(uuid.uuid4().hex, 1, cancel_message()), method=BIDI_APPEND, timeout_ms=300)
    assert raised.value.code is Code.DEADLINE_EXCEEDED


@pytest.mark.parametrize("protocol", [ProtocolType.CONNECT, ProtocolType.GRPC_WEB])
async def test_a_refused_append_keeps_its_code(server: ServerProcess, protocol: ProtocolType) -> None:
    async with ConnectClient(server.base_url, codec=ProtoCodec(), protocol=protocol) as client:
        with pytest.raises(ConnectError) as raised:
            await client.execute_unary(request=append_request("", 0, pb.AgentClientMessage()), method=BIDI_APPEND)
    assert raised.value.code is Code.INVALID_ARGUMENT


@pytest.mark.parametrize("codec", [ProtoCodec(), JsonCodec()], ids=["proto", "json"])
async def test_unary_side_rpcs(server: ServerProcess, codec: ProtoCodec | JsonCodec) -> None:
    async with ConnectClient(server.base_url, codec=codec) as client:
        assert await client.execute_unary(request=struct_pb2.Struct(), method=TRACK_EVENTS) == struct_pb2.Struct()


async def test_is_connected_in_json(server: ServerProcess) -> None:
    """Asked in JSON, answered in JSON. (Asked in protobuf, the answer stays the enveloped empty
    message Cursor's IDE is answered with (PROTOCOL.md 1.2), which a stock unary client cannot read.)"""
    async with ConnectClient(server.base_url, codec=JsonCodec()) as client:
        assert await client.execute_unary(request=empty_pb2.Empty(), method=IS_CONNECTED) == empty_pb2.Empty()


async def test_side_rpcs_over_grpc_web(server: ServerProcess) -> None:
    """The side RPCs answered here, asked as gRPC-Web (upstream is unreachable in this suite, so
    the model list is ours alone)."""
    async with ConnectClient(server.base_url, codec=ProtoCodec(), protocol=ProtocolType.GRPC_WEB) as client:
        assert await client.execute_unary(request=empty_pb2.Empty(), method=IS_CONNECTED) == empty_pb2.Empty()
        assert await client.execute_unary(request=struct_pb2.Struct(), method=TRACK_EVENTS) == struct_pb2.Struct()
        default = await client.execute_unary(request=side_pb2.GetDefaultModelForCliRequest(), method=DEFAULT_MODEL_FOR_CLI)
        usable = await client.execute_unary(request=side_pb2.GetUsableModelsRequest(), method=USABLE_MODELS)
    assert default.model.model_id == MODEL
    assert [m.model_id for m in usable.models] == [MODEL]
