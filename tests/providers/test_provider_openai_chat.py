"""OpenAI Chat Completions (and compatible servers): request mapping and stream details."""
from __future__ import annotations

import asyncio

import msgspec
import pytest

from cursor_byok.config import ModelConfig, ProviderKind
from cursor_byok.http_client import ProviderHttp, streaming_client
from cursor_byok.providers import (
    Finish,
    TextDelta,
    ImagePart,
    Message,
    ModelRequest,
    OverloadedError,
    RetryPolicy,
    TextPart,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingPart,
    ToolCallArgsDelta,
    ToolCallPart,
    ToolCallStart,
    ToolResultPart,
    ToolSchema,
    Usage,
    make_provider,
)
from cursor_byok.providers.openai_chat import ChatTranslator
from tests.fakes import Reply, fake_model, sse

TOOLS = [ToolSchema("Read", "Read.", {"type": "object"})]
OFFLINE = streaming_client(verify=False)  # for request-building tests that send nothing


def endpoint(base_url: str) -> str:
    model = ModelConfig(id="m", provider=ProviderKind.OPENAI_CHAT, model="x", base_url=base_url)
    return make_provider(model, "", OFFLINE).url


def provider(base_url: str = "http://127.0.0.1:9/v1", client: ProviderHttp | None = None, **kw):
    return make_provider(fake_model(ProviderKind.OPENAI_CHAT, base_url, **kw), "sk-test-0000000",
                         client or OFFLINE, retry=RetryPolicy(max_retries=0))


def req(messages: list[Message], **kw) -> ModelRequest:
    return ModelRequest(model="gpt-x", system="SYSTEM", messages=messages, tools=TOOLS, max_tokens=500, **kw)


def body_of(request: ModelRequest, base_url: str = "http://127.0.0.1:9/v1") -> dict:
    return msgspec.json.decode(provider(base_url).encode_request(request))


def test_body_shape_and_token_parameter() -> None:
    body = body_of(req([Message("user", [TextPart("hi")])], effort="low"))
    assert body["messages"][0] == {"role": "system", "content": "SYSTEM"}
    assert body["messages"][1] == {"role": "user", "content": "hi"}
    assert body["tools"] == [{"type": "function", "function": {"name": "Read", "description": "Read.",
                                                               "parameters": {"type": "object"}}}]
    assert body["max_tokens"] == 500 and "max_completion_tokens" not in body  # compatible servers
    assert body["reasoning_effort"] == "low"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    official = body_of(req([Message("user", [TextPart("hi")])]), base_url="https://api.openai.com/v1")
    assert official["max_completion_tokens"] == 500 and "max_tokens" not in official


def test_message_mapping() -> None:
    image = ImagePart("image/jpeg", "QUJD")
    messages = [
        Message("user", [TextPart("see"), image]),
        Message("assistant", [ThinkingPart("why", {"openai_chat": {"field": "reasoning_content"}}),
                              ToolCallPart("c1", "Read", '{"path":"a"}'), ToolCallPart("c2", "Read", "{}")]),
        Message("tool", [ToolResultPart("c1", "Read", "A", images=[image]), ToolResultPart("c2", "Read", "B")]),
        Message("assistant", [ThinkingPart("foreign", {"anthropic": {"signature": "s"}}), TextPart("done")]),
    ]
    out = body_of(req(messages))["messages"][1:]
    url = {"url": "data:image/jpeg;base64,QUJD"}
    assert out == [
        {"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": url}]},
        {"role": "assistant", "content": None, "reasoning_content": "why", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "Read", "arguments": '{"path":"a"}'}},
            {"id": "c2", "type": "function", "function": {"name": "Read", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {"role": "tool", "tool_call_id": "c2", "content": "B"},
        {"role": "user", "content": [{"type": "text", "text": "Image returned by Read (c1):"},
                                     {"type": "image_url", "image_url": url}]},
        {"role": "assistant", "content": "done"},
    ]


def test_endpoints() -> None:
    assert endpoint("https://api.openai.com/v1") == "https://api.openai.com/v1/chat/completions"
    assert endpoint("https://openrouter.ai/api/v1/") == "https://openrouter.ai/api/v1/chat/completions"
    assert endpoint("http://h/v1/chat/completions") == "http://h/v1/chat/completions"


def chunk(delta=None, finish=None, usage=None, choices=True) -> bytes:
    data = {"id": "cc-1", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else []}
    if usage is not None:
        data["usage"] = usage
    return sse(data)


async def run(server, client, chunks: list[bytes]) -> list:
    server.enqueue(Reply(chunks=chunks))
    return [e async for e in provider(server.url + "/v1", client).stream(req([Message("user", [TextPart("x")])]))]


async def test_compatible_server_quirks(fake_server, http_client) -> None:
    # OpenRouter-style `reasoning`, a tool call without id whose name arrives after some arguments,
    # finish_reason "stop" despite the tool call, DeepSeek-style cache hit counter, no [DONE].
    events = await run(fake_server, http_client, [
        chunk({"role": "assistant", "reasoning": "plan"}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"pa'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "Read", "arguments": 'th":"x"}'}}]}),
        chunk(finish="stop"),
        chunk(usage={"prompt_tokens": 50, "completion_tokens": 5, "prompt_cache_hit_tokens": 40}, choices=False),
    ])
    assert events[0] == ThinkingDelta("plan")
    assert events[1] == ThinkingEnd({"openai_chat": {"field": "reasoning"}})
    start = events[2]
    assert isinstance(start, ToolCallStart) and start.name == "Read" and start.id.startswith("call_")
    assert "".join(e.delta for e in events if isinstance(e, ToolCallArgsDelta)) == '{"path":"x"}'
    assert Usage(input_tokens=50, output_tokens=5, cache_read_tokens=40) in events
    assert events[-1] == Finish("tool_use", "cc-1")


async def test_length_finish_is_max_tokens(fake_server, http_client) -> None:
    events = await run(fake_server, http_client, [chunk({"content": "trunc"}), chunk(finish="length"),
                                                  b"data: [DONE]\n\n"])
    assert events[-1] == Finish("max_tokens", "cc-1")


async def test_error_chunk_inside_the_stream(fake_server, http_client) -> None:
    with pytest.raises(OverloadedError):
        await run(fake_server, http_client, [chunk({"content": "a"}),
                                             sse({"error": {"message": "busy", "code": "server_is_overloaded"}})])


async def test_deltas_that_come_in_one_read_reach_the_run_as_one(fake_server, http_client) -> None:
    # A provider faster than the server leaves many deltas in each read; each one would cost the
    # loop every other stream shares a frame, an encode and a send. The text stays whole, in order.
    words = [f" w{i}" for i in range(50)]
    body = b"".join([chunk({"role": "assistant", "reasoning": "think "}), chunk({"reasoning": "more"}),
                     *(chunk({"content": w}) for w in words), chunk(finish="stop"), b"data: [DONE]\n\n"])
    fake_server.enqueue(Reply(body=body))
    events = [e async for e in provider(fake_server.url + "/v1", http_client).stream(req([Message("user", [TextPart("x")])]))]
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(texts) == "".join(words)
    assert len(texts) < len(words) / 2, texts
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "think more"
    assert events[-1] == Finish("end_turn", "cc-1")


async def test_an_error_after_text_in_the_same_read_streams_the_text_first_and_is_not_retried(fake_server, http_client) -> None:
    body = chunk({"content": "partial"}) + sse({"error": {"message": "busy", "code": "server_is_overloaded"}})
    fake_server.enqueue(Reply(body=body))
    fake_server.enqueue(Reply(body=body))
    seen = []
    retrying = make_provider(fake_model(ProviderKind.OPENAI_CHAT, fake_server.url + "/v1"), "sk-test-0000000", http_client,
                             retry=RetryPolicy(max_retries=2, base_delay=0.0))
    with pytest.raises(OverloadedError):
        async for event in retrying.stream(req([Message("user", [TextPart("x")])])):
            seen.append(event)
    assert seen == [TextDelta("partial")]
    assert len(fake_server.requests) == 1


async def test_tool_call_argument_deltas_that_come_in_one_read_reach_the_run_as_one(fake_server, http_client) -> None:
    # Tool arguments stream token by token as text does: one read's pieces of one call, one event.
    pieces = ['{"pa', 'th":', ' "src/', 'main', '.py"', "}"]
    body = b"".join([chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "Read", "arguments": ""}}]}),
                     *(chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in pieces),
                     chunk(finish="tool_calls"), b"data: [DONE]\n\n"])
    fake_server.enqueue(Reply(body=body))
    events = [e async for e in provider(fake_server.url + "/v1", http_client).stream(req([Message("user", [TextPart("x")])]))]
    args = [e for e in events if isinstance(e, ToolCallArgsDelta)]
    assert "".join(e.delta for e in args) == "".join(pieces)
    assert {(e.index, e.id) for e in args} == {(0, "call_1")}
    assert len(args) < len(pieces) / 2, args


async def test_a_read_far_behind_the_provider_lets_the_loop_run_between_its_parts(fake_server, http_client) -> None:
    # A server behind a fast provider finds hundreds of events in one read; translated in one step,
    # every other stream's work and every run start's next step waits for all of them. In parts, the
    # loop runs what is ready between two parts: the text is the same, whole and in order.
    words = [f" w{i:04d}" for i in range(2_000)]
    body = b"".join([*(chunk({"content": w}) for w in words), chunk(finish="stop"), b"data: [DONE]\n\n"])
    fake_server.enqueue(Reply(body=body))
    seen: list[str] = []
    seen_when_the_loop_ran: list[int] = []
    loop = asyncio.get_running_loop()
    async for event in provider(fake_server.url + "/v1", http_client).stream(req([Message("user", [TextPart("x")])])):
        if isinstance(event, TextDelta):
            if not seen:
                loop.call_soon(lambda: seen_when_the_loop_ran.append(len("".join(seen))))
            seen.append(event.text)
    assert "".join(seen) == "".join(words)
    assert seen_when_the_loop_ran and seen_when_the_loop_ran[0] < len("".join(words)) / 4, seen_when_the_loop_ran


def _fed(*chunks: dict) -> list:
    """The translator's events for each chunk, one list per chunk (sans IO)."""
    translator = ChatTranslator()
    return [list(translator.feed("", msgspec.json.encode(c).decode())) for c in chunks]


def _choice(delta: dict, finish: str | None = None, index: int = 0) -> dict:
    return {"index": index, "delta": delta, "finish_reason": finish}


def test_text_chunks_beside_the_plain_one_keep_everything_they_carry() -> None:
    """A chunk of one text piece takes a short way; a chunk that carries anything more does not lose it."""
    text_and_finish, text_and_usage, other_choice, empty_reasoning, refusal = _fed(
        {"id": "cc-1", "choices": [_choice({"content": "a"}, "stop")]},
        {"choices": [_choice({"content": "b"})], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
        {"choices": [_choice({"content": "ignored"}, index=1)]},
        {"choices": [_choice({"content": "c", "reasoning_content": ""})]},
        {"choices": [_choice({"content": "d", "refusal": "no"})]},
    )
    assert text_and_finish == [TextDelta("a")]
    assert text_and_usage == [TextDelta("b")]
    assert other_choice == []
    assert empty_reasoning == [TextDelta("c")]
    assert refusal == [TextDelta("d")]
    after_thinking, with_call, two_choices = _fed(
        {"choices": [_choice({"reasoning_content": "hm"})]},
        {"choices": [_choice({"content": "e"})]},
        {"choices": [_choice({"content": "f", "tool_calls": [{"index": 0, "id": "c1", "function": {"name": "Read"}}]})]},
    )[1:] + _fed({"choices": [_choice({"content": "g"}), _choice({"content": "h"}, index=1)]})
    assert after_thinking == [ThinkingEnd({"openai_chat": {"field": "reasoning_content"}}), TextDelta("e")]
    assert with_call == [TextDelta("f"), ToolCallStart(0, "c1", "Read")]
    assert two_choices == [TextDelta("g")]


def test_a_plain_text_chunk_still_ends_with_the_response_id_and_usage() -> None:
    translator = ChatTranslator()
    for data in ({"id": "cc-9", "choices": [_choice({"content": "x"})]}, {"id": "cc-other", "choices": [_choice({"content": "y"})]},
                 {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}, {"choices": [_choice({}, "stop")]}):
        translator.feed("", msgspec.json.encode(data).decode())
    assert list(translator.close()) == [Usage(input_tokens=3, output_tokens=2), Finish("end_turn", "cc-9")]
    translator = ChatTranslator()  # a first chunk without an id: the first id that comes
    for data in ({"choices": [_choice({"content": "x"})]}, {"id": "cc-2", "choices": [_choice({"content": "y"})]},
                 {"id": "cc-3", "choices": [_choice({}, "stop")]}):
        translator.feed("", msgspec.json.encode(data).decode())
    assert list(translator.close()) == [Finish("end_turn", "cc-2")]


async def test_streams_far_behind_the_provider_share_each_pass_of_the_loop(fake_server, http_client) -> None:
    # Twelve streams each find a whole 2,000-word answer in their reads. Each alone hands it on in
    # parts; together, a pass of the loop would carry one part of every stream (12 × 8 KiB), and a
    # run start's every step waits for such a pass. The streams share one budget per pass instead.
    from cursor_byok.providers.pass_share import PER_PASS_BYTES
    from cursor_byok.providers.transport import _READ_PART_BYTES

    streams = 12
    words = [f" w{i:04d}" for i in range(2_000)]
    body = b"".join([*(chunk({"content": w}) for w in words), chunk(finish="stop"), b"data: [DONE]\n\n"])
    for _ in range(streams):
        fake_server.enqueue(Reply(body=body))
    loop = asyncio.get_running_loop()
    passes = [0]
    words_in_pass: dict[int, int] = {}
    first_texts: set[int] = set()  # passes in which a stream's first text came (it goes at once)
    done = False

    def tick() -> None:
        passes[0] += 1
        if not done:
            loop.call_soon(tick)

    async def one() -> str:
        text = []
        async for event in provider(fake_server.url + "/v1", http_client).stream(req([Message("user", [TextPart("x")])])):
            if isinstance(event, TextDelta):
                if not text:
                    first_texts.add(passes[0])
                text.append(event.text)
                words_in_pass[passes[0]] = words_in_pass.get(passes[0], 0) + event.text.count(" w")
        return "".join(text)

    tick()
    try:
        texts = await asyncio.gather(*(one() for _ in range(streams)))
    finally:
        done = True
    assert texts == ["".join(words)] * streams  # every stream whole and in order
    per_word = len(chunk({"content": words[0]}))
    # A pass carries the budget and at most one part past it (but for streams' first texts, at once).
    most = (PER_PASS_BYTES + _READ_PART_BYTES) // per_word + 1
    later = [n for at, n in words_in_pass.items() if at not in first_texts]
    assert later and max(later) <= most, sorted(later)[-5:]
