"""The same scenarios against all three adapters, each talking to a local server that streams the
provider's real wire format."""
from __future__ import annotations

import asyncio
import gzip
import logging
import traceback

import httpx
import pytest

from cursor_byok.http_client import ProviderHttp, streaming_client
from cursor_byok.providers import (
    AuthError,
    ContextLengthError,
    ErrorKind,
    Finish,
    IdleTimeoutError,
    Message,
    ModelRequest,
    NetworkError,
    OverloadedError,
    RateLimitError,
    RefusalError,
    RetryPolicy,
    StreamCutError,
    TextDelta,
    TextPart,
    ThinkingDelta,
    ThinkingEnd,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSchema,
    Usage,
    make_provider,
)
from tests.fakes import DIALECTS, OPENAI_CHAT, CallSpec, Dialect, FakeProviderServer, Reply, UsageSpec, fake_model, joined_deltas

dialects = pytest.mark.parametrize("dialect", list(DIALECTS.values()), ids=lambda d: d.kind.value)

CANARY = "sk-canary-0123456789abcdefCANARY"

READ_TOOL = ToolSchema(
    name="Read",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def request(text: str = "hello", tools: list[ToolSchema] | None = None) -> ModelRequest:
    return ModelRequest(
        model="fake-model",
        system="You are a test.",
        messages=[Message("user", [TextPart(text)])],
        tools=tools or [],
        max_tokens=1024,
    )


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def provider_for(dialect: Dialect, server: FakeProviderServer, client: ProviderHttp, *,
                 key: str = "test-key-123456", retries: int = 0, sleep: Sleeps | None = None, **model_kw):
    model = fake_model(dialect.kind, server.url, **model_kw)
    return make_provider(model, key, client, retry=RetryPolicy(max_retries=retries, base_delay=0.001),
                         sleep=sleep or Sleeps())


async def collect(provider, req: ModelRequest) -> list:
    return [event async for event in provider.stream(req)]


@dialects
async def test_text_turn_streams_deltas_usage_and_finish(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(dialect.text(["Hel", "lo", " world"]))
    events = joined_deltas(await collect(provider_for(dialect, fake_server, http_client), request()))

    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hello world"]
    assert isinstance(events[-1], Finish) and events[-1].stop_reason == "end_turn"
    assert events[-1].response_id
    assert [type(e) for e in events[-2:]] == [Usage, Finish]
    body = fake_server.requests[0].json()
    assert body["model"] == "fake-model" and body["stream"] is True
    assert "You are a test." in fake_server.requests[0].body.decode()


@dialects
async def test_request_head_names_its_host_length_and_format(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(dialect.text(["ok"]))
    await collect(provider_for(dialect, fake_server, http_client, key="test-key-123456"), request("é" * 3_000))

    sent = fake_server.requests[0]
    assert sent.method == "POST"
    assert sent.headers["host"] == fake_server.url.split("://", 1)[1].split("/", 1)[0]
    assert int(sent.headers["content-length"]) == len(sent.body) > 6_000
    assert "transfer-encoding" not in sent.headers
    assert sent.headers["content-type"] == "application/json" and sent.headers["accept"] == "text/event-stream"
    assert "test-key-123456" in (sent.headers.get("authorization", "") + sent.headers.get("x-api-key", ""))
    assert "é" * 3_000 in sent.body.decode()


@dialects
async def test_thinking_turn_keeps_replay_data(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(dialect.thinking(["Let me ", "think."], ["Answer."]))
    events = await collect(provider_for(dialect, fake_server, http_client), request())

    kinds = [type(e) for e in events]
    thinking = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    assert thinking == "Let me think."
    end = next(e for e in events if isinstance(e, ThinkingEnd))
    assert end.replay  # provider-specific verbatim data; shapes checked per provider
    assert kinds.index(ThinkingEnd) < kinds.index(TextDelta)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Answer."


@dialects
async def test_two_parallel_tool_calls(dialect: Dialect, fake_server, http_client) -> None:
    calls = [CallSpec("call_a", "Read", ['{"pa', 'th": "a.py"}']), CallSpec("call_b", "Read", ['{"path": "b.py"}'])]
    fake_server.enqueue(dialect.tool_calls(calls, pieces=["Reading both."]))
    events = await collect(provider_for(dialect, fake_server, http_client), request(tools=[READ_TOOL]))

    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.index, s.id, s.name) for s in starts] == [(0, "call_a", "Read"), (1, "call_b", "Read")]
    args = {i: "".join(e.delta for e in events if isinstance(e, ToolCallArgsDelta) and e.index == i) for i in (0, 1)}
    assert args == {0: '{"path": "a.py"}', 1: '{"path": "b.py"}'}
    assert [(e.index, e.id) for e in events if isinstance(e, ToolCallEnd)] == [(0, "call_a"), (1, "call_b")]
    assert events[-1] == Finish("tool_use", events[-1].response_id)
    body = fake_server.requests[0].json()
    assert len(body["tools"]) == 1


@dialects
async def test_usage_includes_cache_reads_and_writes(dialect: Dialect, fake_server, http_client) -> None:
    spec = UsageSpec(input=120, output=33, cache_read=4000, cache_write=700, reasoning=9)
    fake_server.enqueue(dialect.text(["ok"], usage=spec))
    events = await collect(provider_for(dialect, fake_server, http_client), request())

    usage = next(e for e in events if isinstance(e, Usage))
    assert usage == dialect.expected_usage(spec)
    assert usage.cache_read_tokens == 4000
    assert usage.input_tokens >= 4120  # the whole prompt, cached part included


@dialects
async def test_auth_error_is_typed_and_not_retried(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(dialect.auth_error())
    with pytest.raises(AuthError) as info:
        await collect(provider_for(dialect, fake_server, http_client, retries=3), request())
    assert info.value.status == 401 and info.value.kind is ErrorKind.AUTH and not info.value.retryable
    assert len(fake_server.requests) == 1


@dialects
async def test_rate_limit_reports_retry_after(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(dialect.rate_limited({"retry-after": "7"}))
    with pytest.raises(RateLimitError) as info:
        await collect(provider_for(dialect, fake_server, http_client), request())
    assert info.value.status == 429 and info.value.retry_after == 7.0 and info.value.retryable


@dialects
async def test_rate_limit_is_retried_after_the_advertised_delay(dialect: Dialect, fake_server, http_client) -> None:
    sleeps = Sleeps()
    fake_server.enqueue(dialect.rate_limited({"retry-after-ms": "25"}), dialect.text(["after retry"]))
    events = await collect(provider_for(dialect, fake_server, http_client, retries=2, sleep=sleeps), request())
    assert sleeps.delays == [0.025]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["after retry"]
    assert len(fake_server.requests) == 2
    assert fake_server.requests[0].body == fake_server.requests[1].body


@dialects
async def test_retries_are_bounded(dialect: Dialect, fake_server, http_client) -> None:
    sleeps = Sleeps()
    fake_server.enqueue(*(dialect.overloaded() for _ in range(3)))
    with pytest.raises(OverloadedError):
        await collect(provider_for(dialect, fake_server, http_client, retries=2, sleep=sleeps), request())
    assert len(fake_server.requests) == 3
    assert sleeps.delays == [0.001, 0.002]  # exponential backoff from base_delay


@dialects
async def test_overloaded_is_typed(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(dialect.overloaded())
    with pytest.raises(OverloadedError) as info:
        await collect(provider_for(dialect, fake_server, http_client), request())
    assert info.value.status in (503, 529) and info.value.retryable


@dialects
async def test_overloaded_in_the_stream_before_output_is_retried(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(dialect.overloaded_in_stream(), dialect.text(["fine"]))
    events = await collect(provider_for(dialect, fake_server, http_client, retries=1), request())
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["fine"]
    assert len(fake_server.requests) == 2


@dialects
async def test_context_length_error_is_typed(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(dialect.context_length())
    with pytest.raises(ContextLengthError) as info:
        await collect(provider_for(dialect, fake_server, http_client, retries=2), request())
    assert info.value.status in (400, 413) and not info.value.retryable
    assert len(fake_server.requests) == 1


@dialects
async def test_refusal_is_typed(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(dialect.refusal())
    with pytest.raises(RefusalError) as info:
        await collect(provider_for(dialect, fake_server, http_client), request())
    assert info.value.kind is ErrorKind.REFUSAL


@dialects
async def test_reads_split_mid_character_and_mid_crlf_decode_the_same(dialect: Dialect, fake_server, http_client) -> None:
    # Real streams split wherever the network does: inside a multi-byte character, between the \r
    # and \n of a CRLF line ending. Cut there, and pause so each piece is a read of its own.
    pieces = ["héllo ", "wörld 🚀", "!"]
    body = b"".join(dialect.text(pieces).chunks).replace(b"\n", b"\r\n")
    cuts = [i for i in range(1, len(body)) if 0x80 <= body[i] < 0xC0 or body[i - 1 : i + 1] == b"\r\n"]
    assert len(cuts) > 10
    bounds = [0, *cuts, len(body)]
    fake_server.enqueue(Reply(chunks=[body[a:b] for a, b in zip(bounds, bounds[1:])], chunk_delay=0.005))
    events = await collect(provider_for(dialect, fake_server, http_client), request())
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "".join(pieces)
    assert any(isinstance(e, Finish) for e in events)


@dialects
async def test_bad_byte_then_a_split_character_decode_as_a_stream(dialect: Dialect, fake_server, http_client) -> None:
    # Reads are decoded whole while they hold whole characters; a bad byte (U+FFFD in its place)
    # switches to decoding as a stream, which must still join a character split between later reads.
    pieces = ["before ", "bad#byte ", "then 🚀 after"]
    body = b"".join(dialect.text(pieces).chunks).replace(b"#", b"\xff")
    rocket = body.index("🚀".encode())
    bad = body.index(b"\xff")
    bounds = [0, bad + 1, rocket + 2, len(body)]
    fake_server.enqueue(Reply(chunks=[body[a:b] for a, b in zip(bounds, bounds[1:])], chunk_delay=0.005))
    events = await collect(provider_for(dialect, fake_server, http_client), request())
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "before bad\ufffdbyte then 🚀 after"


@dialects
async def test_gzip_encoded_stream_is_decoded(dialect: Dialect, fake_server, http_client) -> None:
    pieces = ["compressed ", "and ", "streamed"]
    packed = gzip.compress(b"".join(dialect.text(pieces).chunks))
    parts = [packed[i : i + 16] for i in range(0, len(packed), 16)]
    fake_server.enqueue(Reply(chunks=parts, headers={"content-encoding": "gzip"}, chunk_delay=0.002))
    events = await collect(provider_for(dialect, fake_server, http_client), request())
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "".join(pieces)


@dialects
async def test_stalled_stream_times_out_after_output(dialect: Dialect, fake_server, http_client) -> None:
    reply = dialect.text(["a", "b", "c", "d"])
    reply.stall_after = len(reply.chunks) - 3  # some text is out, the rest never comes
    fake_server.enqueue(reply)
    provider = provider_for(dialect, fake_server, http_client, retries=2, idle_timeout_seconds=0.3,
                            request_timeout_seconds=60)
    seen: list = []

    async def consume() -> None:
        async for event in provider.stream(request()):
            seen.append(event)

    with pytest.raises(IdleTimeoutError, match="no event for 0.3s"):
        # Once events flow, the short idle bound applies, not the long first-response bound.
        await asyncio.wait_for(consume(), 20)
    assert any(isinstance(e, TextDelta) for e in seen)
    assert len(fake_server.requests) == 1  # output already streamed: never retried
    assert fake_server.requests[0].disconnected.wait(5)  # and the connection was closed


@dialects
async def test_stall_before_the_first_event_is_bounded_and_retried(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(Reply(chunks=[b": keep"], stall_after=0), Reply(chunks=[b": keep"], stall_after=0))
    provider = provider_for(dialect, fake_server, http_client, retries=1, request_timeout_seconds=0.3)
    with pytest.raises(IdleTimeoutError):
        await collect(provider, request())
    assert len(fake_server.requests) == 2


@dialects
async def test_a_response_that_never_comes_is_bounded_and_retried(dialect: Dialect, fake_server, http_client) -> None:
    fake_server.enqueue(Reply(stall_head=True), Reply(stall_head=True))
    provider = provider_for(dialect, fake_server, http_client, retries=1, request_timeout_seconds=0.3)
    with pytest.raises(IdleTimeoutError, match="no response within 0.3s"):
        await asyncio.wait_for(collect(provider, request()), 20)
    assert len(fake_server.requests) == 2
    assert all(sent.disconnected.wait(5) for sent in fake_server.requests)  # each connection was given up


@dialects
async def test_stream_cut_midway_is_a_clean_error(dialect: Dialect, fake_server, http_client) -> None:
    reply = dialect.tool_calls([CallSpec("call_a", "Read", ['{"path"', ': "a.py"}'])], pieces=["x"])
    reply.cut_after = len(reply.chunks) - 3
    fake_server.enqueue(reply)
    seen: list = []
    with pytest.raises(StreamCutError) as info:
        async for event in provider_for(dialect, fake_server, http_client, retries=2).stream(request()):
            seen.append(event)
    assert info.value.kind is ErrorKind.STREAM_CUT
    assert not any(isinstance(e, (ToolCallEnd, Finish)) for e in seen)
    assert len(fake_server.requests) == 1


@dialects
async def test_stream_that_ends_without_terminal_event_is_cut(dialect: Dialect, fake_server, http_client) -> None:
    reply = dialect.text(["a", "b"])
    reply.chunks = reply.chunks[:-3]  # the server closes the body cleanly, but early
    fake_server.enqueue(reply)
    with pytest.raises(StreamCutError):
        await collect(provider_for(dialect, fake_server, http_client), request())


@dialects
async def test_canary_key_never_leaks(dialect: Dialect, fake_server, http_client, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    fake_server.enqueue(dialect.auth_error(echo=CANARY), dialect.overloaded(), dialect.auth_error(echo=CANARY))
    provider = provider_for(dialect, fake_server, http_client, key=CANARY, retries=1)
    errors: list[BaseException] = []
    for _ in range(2):
        try:
            await collect(provider, request())
        except AuthError as err:
            errors.append(err)
    # A connection failure too (nothing listens on this port any more).
    closed = FakeProviderServer().start()
    closed.close()
    dead = make_provider(fake_model(dialect.kind, closed.url), CANARY, http_client, retry=RetryPolicy(max_retries=0))
    with pytest.raises(NetworkError) as net:
        await collect(dead, request())
    errors.append(net.value)

    sent = fake_server.requests[0].headers
    assert CANARY in (sent.get("authorization", "") + sent.get("x-api-key", ""))  # the key was really used
    assert "[REDACTED]" in str(errors[0])
    texts = [repr(provider), repr(dead), repr(vars(provider)), caplog.text]
    for err in errors:
        texts += [str(err), repr(err), repr(err.args), "".join(traceback.format_exception(err))]
    assert all(CANARY not in text for text in texts)


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "ALL_PROXY"])
async def test_proxy_from_the_environment_carries_provider_streams(fake_server, monkeypatch, variable: str) -> None:
    """Behind a corporate proxy the user sets HTTP(S)_PROXY or ALL_PROXY, and provider traffic must follow it."""
    request_lines: list[bytes] = []

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        first, _, rest = head.partition(b"\r\n")
        request_lines.append(first)
        method, target, version = first.split(b" ")
        url = httpx.URL(target.decode())
        length = next((int(v) for k, _, v in (line.partition(b":") for line in rest.split(b"\r\n")) if k.lower() == b"content-length"), 0)
        body = await reader.readexactly(length)
        upstream_reader, upstream_writer = await asyncio.open_connection(url.host, url.port)
        upstream_writer.write(b"%s %s %s\r\n%s%s" % (method, url.raw_path, version, rest, body))
        while data := await upstream_reader.read(65536):
            writer.write(data)
            await writer.drain()
        upstream_writer.close()
        writer.close()

    proxy = await asyncio.start_server(forward, "127.0.0.1", 0)
    monkeypatch.setenv(variable, f"http://127.0.0.1:{proxy.sockets[0].getsockname()[1]}")
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        if name != variable:
            monkeypatch.delenv(name, raising=False)
    fake_server.enqueue(OPENAI_CHAT.text(["through ", "the proxy"]))
    async with proxy, streaming_client() as client:
        events = await collect(provider_for(OPENAI_CHAT, fake_server, client), request())
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "through the proxy"
    assert request_lines == [f"POST {fake_server.url}/v1/chat/completions HTTP/1.1".encode()]


async def test_a_call_cancelled_while_its_request_waits_leaves_the_shared_commit_alone(fake_server: FakeProviderServer, http_client: ProviderHttp) -> None:
    """`ready` is the turn's input commit, shared with every write in that commit (the appends'
    journal rows among them): cancelling the call that waits on it must not cancel it."""
    provider = make_provider(fake_model(OPENAI_CHAT.kind, fake_server.url), CANARY, http_client)
    commit: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    entered = asyncio.Event()

    async def consume() -> None:
        entered.set()
        async for _ in provider.stream(request(), ready=commit):
            pass

    call = asyncio.create_task(consume())
    await entered.wait()  # its first step ran on to the wait for the commit
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert not commit.cancelled()
