"""Anthropic Messages: request mapping, prompt-cache breakpoints and stream details."""
from __future__ import annotations

import msgspec

from cursor_byok.config import ModelConfig, ProviderKind
from cursor_byok.http_client import ProviderHttp, streaming_client
from cursor_byok.providers import (
    Finish,
    ImagePart,
    Message,
    ModelRequest,
    RetryPolicy,
    TextPart,
    ThinkingEnd,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    ToolSchema,
    make_provider,
)
from tests.fakes import ANTHROPIC, Reply, UsageSpec, fake_model, sse

TOOLS = [ToolSchema("Grep", "Search.", {"type": "object"}), ToolSchema("Read", "Read.", {"type": "object"})]
OFFLINE = streaming_client(verify=False)  # for request-building tests that send nothing


def endpoint(base_url: str) -> str:
    model = ModelConfig(id="m", provider=ProviderKind.ANTHROPIC, model="x", base_url=base_url)
    return make_provider(model, "", OFFLINE).url


def provider(base_url: str = "http://127.0.0.1:9", client: ProviderHttp | None = None, **kw):
    return make_provider(fake_model(ProviderKind.ANTHROPIC, base_url, **kw), "sk-ant-test-000000",
                         client or OFFLINE, retry=RetryPolicy(max_retries=0))


def body_of(request: ModelRequest, **kw) -> dict:
    return msgspec.json.decode(provider(**kw).encode_request(request))


def req(messages: list[Message], **kw) -> ModelRequest:
    return ModelRequest(model="claude-x", system="SYSTEM", messages=messages, tools=TOOLS, max_tokens=8000, **kw)


def test_cache_breakpoints_sit_on_the_stable_prefix_only() -> None:
    body = body_of(req([Message("user", [TextPart("hi")])]))
    assert body["system"] == [{"type": "text", "text": "SYSTEM", "cache_control": {"type": "ephemeral"}}]
    assert [t.get("cache_control") for t in body["tools"]] == [None, {"type": "ephemeral"}]
    assert body["cache_control"] == {"type": "ephemeral"}  # moving breakpoint, message bytes untouched
    assert "cache_control" not in msgspec.json.encode(body["messages"]).decode()
    assert list(body)[:4] == ["model", "system", "tools", "messages"]


def test_request_level_cache_control_can_be_removed_for_compatible_servers() -> None:
    body = body_of(req([Message("user", [TextPart("hi")])]), extra_params={"cache_control": None, "top_k": 5})
    assert "cache_control" not in body and body["top_k"] == 5


def test_thinking_budget_and_effort() -> None:
    body = body_of(req([Message("user", [TextPart("hi")])], thinking_budget=10_000, effort="high"))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 10_000}
    assert body["max_tokens"] > 10_000  # room for the answer beyond the budget
    assert body["output_config"] == {"effort": "high"}
    plain = body_of(req([Message("user", [TextPart("hi")])]))
    assert "thinking" not in plain and plain["max_tokens"] == 8000


def test_message_mapping() -> None:
    image = ImagePart("image/png", "AAAA")
    messages = [
        Message("user", [TextPart("look"), image, TextPart("")]),
        Message("assistant", [
            ThinkingPart("hmm", {"anthropic": {"signature": "SIG"}}),
            ThinkingPart("", {"anthropic": {"redacted_data": "REDACTED"}}),
            ThinkingPart("foreign", {"openai": {"id": "rs_1"}}),
            TextPart("calling"),
            ToolCallPart("t1", "Read", '{"path": "a"}'),
            ToolCallPart("t2", "Read", '{"path": '),
            ToolCallPart("t3", "Grep", ""),
        ]),
        Message("tool", [
            ToolResultPart("t1", "Read", "data"),
            ToolResultPart("t2", "Read", "bad args", is_error=True),
            ToolResultPart("t3", "Grep", "", images=[image]),
        ]),
        Message("assistant", [TextPart("")]),  # nothing sendable: left out
    ]
    out = body_of(req(messages))["messages"]
    img = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    assert out == [
        {"role": "user", "content": [{"type": "text", "text": "look"}, img]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "SIG"},
            {"type": "redacted_thinking", "data": "REDACTED"},
            {"type": "text", "text": "calling"},
            {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}},
            {"type": "tool_use", "id": "t2", "name": "Read", "input": {"_invalid_arguments": '{"path": '}},
            {"type": "tool_use", "id": "t3", "name": "Grep", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "data"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "bad args", "is_error": True},
            {"type": "tool_result", "tool_use_id": "t3", "content": [img]},
        ]},
    ]


def test_endpoint_and_headers() -> None:
    assert endpoint("https://api.anthropic.com") == "https://api.anthropic.com/v1/messages"
    assert endpoint("https://gw.example/anthropic/v1") == "https://gw.example/anthropic/v1/messages"
    assert endpoint("https://gw.example/x/v1/messages") == "https://gw.example/x/v1/messages"
    assert endpoint("") == "https://api.anthropic.com/v1/messages"


async def test_headers_carry_key_version_and_extra_headers(fake_server, http_client) -> None:
    fake_server.enqueue(ANTHROPIC.text(["ok"]))
    p = provider(fake_server.url, http_client, extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"})
    [e async for e in p.stream(req([Message("user", [TextPart("hi")])]))]
    headers = fake_server.requests[0].headers
    assert headers["x-api-key"] == "sk-ant-test-000000"
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert fake_server.requests[0].path == "/v1/messages"


async def test_header_names_go_out_lowercase_as_configured_or_not(fake_server, http_client) -> None:
    # What reaches the provider stays byte for byte what it was: every header name in lowercase,
    # however a configured extra header spells it.
    fake_server.enqueue(ANTHROPIC.text(["ok"]))
    p = provider(fake_server.url, http_client, extra_headers={"Anthropic-Beta": "x", "X-Team-Tag": "y"})
    [e async for e in p.stream(req([Message("user", [TextPart("hi")])]))]
    names = fake_server.requests[0].names
    assert {"x-api-key", "anthropic-version", "anthropic-beta", "x-team-tag", "content-type", "accept"} <= set(names)
    assert "X-Team-Tag" not in names and "Anthropic-Beta" not in names


async def test_redacted_thinking_and_max_tokens_stop(fake_server, http_client) -> None:
    chunks = ANTHROPIC.text(["cut"], usage=UsageSpec()).chunks
    redacted = [
        sse({"type": "content_block_start", "index": 0,
             "content_block": {"type": "redacted_thinking", "data": "OPAQUE"}}, "content_block_start"),
        sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
    ]
    stop = sse({"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                "usage": {"output_tokens": 9}}, "message_delta")
    fake_server.enqueue(Reply(chunks=[chunks[0], *redacted, *chunks[2:-2], stop, chunks[-1]]))
    events = [e async for e in provider(fake_server.url, http_client).stream(req([Message("user", [TextPart("x")])]))]
    assert ThinkingEnd({"anthropic": {"redacted_data": "OPAQUE"}}) in events
    assert events[-1] == Finish("max_tokens", "msg_fake1")
