"""The HTTP/2 Run stream's own edges: what it refuses, and a client that finishes sending early."""
from __future__ import annotations

import uuid

from cursor_byok.h2_client import H2Client
from cursor_byok.protocol import parse_end_stream
from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import RUN, envelope, heartbeat_message, run_request
from tests.harness.server import ServerProcess

from .conftest import MODEL


async def run_stream(server: ServerProcess, *bodies: bytes, end: bool = True) -> bytes:
    """Open a Run stream, send `bodies` (each one envelope), finish sending, read to the end."""
    client = await H2Client.connect("127.0.0.1", server.port)
    try:
        head = [(":method", "POST"), (":scheme", "http"), (":authority", f"127.0.0.1:{server.port}"), (":path", RUN)]
        stream = await client.request([*head, ("content-type", "application/connect+proto"), ("x-request-id", uuid.uuid4().hex)])
        for body in bodies:
            await stream.send(body)
        if end:
            await stream.end()
        status, headers = await stream.response()
        assert status == 200 and ("content-type", "application/connect+proto") in headers
        out = b""
        while (data := await stream.read()) is not None:
            out += data
        return out
    finally:
        await client.close()


def terminal(body: bytes):  # type: ignore[no-untyped-def]
    assert body[0] == 2, body[:16]
    return parse_end_stream(body[5:])


async def test_a_first_message_that_selects_no_model_is_refused(server: ServerProcess) -> None:
    err = terminal(await run_stream(server, envelope(heartbeat_message().SerializeToString())))
    assert err is not None and err.code == "invalid_argument" and "select a model" in err.message


async def test_undecodable_input_is_refused(server: ServerProcess) -> None:
    err = terminal(await run_stream(server, envelope(b"\xff\xff\xff not protobuf")))
    assert err is not None and err.code == "invalid_argument"


async def test_a_stream_with_no_message_is_refused(server: ServerProcess) -> None:
    err = terminal(await run_stream(server))
    assert err is not None and err.code == "invalid_argument"


async def test_finishing_the_request_side_early_still_gets_the_whole_run(server: ServerProcess, provider: FakeProviderServer) -> None:
    provider.enqueue(OPENAI_CHAT.text(["all ", "of ", "it"]))
    body = await run_stream(server, envelope(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex).SerializeToString()))
    assert body.endswith(envelope(b"{}", 2))
    assert b"all " in body and b"it" in body


async def test_every_other_call_passes_through_the_proxy_over_http2(tmp_path, provider: FakeProviderServer) -> None:  # type: ignore[no-untyped-def]
    """With the IDE on HTTP/2, a call we do not serve still reaches Cursor (the stand-in) and its
    answer comes back whole, through the proxy's TLS and HTTP/2 and the gateway."""
    from tests.fakes import Reply
    from tests.harness.run_channel import h2_through_proxy

    from .edge_support import edge_config, free_port

    with FakeProviderServer() as upstream:
        upstream.enqueue(Reply(chunks=[b"\x00\x00\x00\x00\x02hi", b"\x02\x00\x00\x00\x02{}"], content_type="application/connect+proto"))
        config = edge_config(tmp_path, MODEL, provider, upstream, proxy_port=free_port())
        with ServerProcess(config):
            client = await h2_through_proxy(config.proxy_port, config.data_dir / "ca" / "ca.crt")
            try:
                head = [(":method", "POST"), (":scheme", "https"), (":authority", "api2.cursor.sh"), (":path", "/aiserver.v1.AiService/StreamSomething")]
                stream = await client.request([*head, ("content-type", "application/connect+proto"), ("authorization", "Bearer user-token")])
                await stream.send(envelope(b"request"), end=True)
                status, _ = await stream.response()
                body = b""
                while (data := await stream.read()) is not None:
                    body += data
            finally:
                await client.close()  # type: ignore[attr-defined]
    assert status == 200 and body == b"\x00\x00\x00\x00\x02hi\x02\x00\x00\x00\x02{}"
    [request] = upstream.requests
    assert request.path == "/aiserver.v1.AiService/StreamSomething" and request.body == envelope(b"request")
    assert request.headers["authorization"] == "Bearer user-token"
