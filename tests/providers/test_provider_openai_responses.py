"""OpenAI Responses: stateless request mapping (reasoning replay) and stream details."""
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
    ThinkingDelta,
    ThinkingEnd,
    ThinkingPart,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallPart,
    ToolResultPart,
    ToolSchema,
    make_provider,
)
from tests.fakes import Reply, fake_model, joined_deltas, sse

TOOLS = [ToolSchema("Read", "Read.", {"type": "object"})]
OFFLINE = streaming_client(verify=False)  # for request-building tests that send nothing


def endpoint(base_url: str) -> str:
    model = ModelConfig(id="m", provider=ProviderKind.OPENAI_RESPONSES, model="x", base_url=base_url)
    return make_provider(model, "", OFFLINE).url


def provider(base_url: str = "http://127.0.0.1:9/v1", client: ProviderHttp | None = None):
    return make_provider(fake_model(ProviderKind.OPENAI_RESPONSES, base_url), "sk-test-0000000",
                         client or OFFLINE, retry=RetryPolicy(max_retries=0))


def req(messages: list[Message], **kw) -> ModelRequest:
    return ModelRequest(model="gpt-x", system="SYSTEM", messages=messages, tools=TOOLS, max_tokens=700, **kw)


def body_of(request: ModelRequest) -> dict:
    return msgspec.json.decode(provider().encode_request(request))


def test_body_shape() -> None:
    body = body_of(req([Message("user", [TextPart("hi")])], effort="medium"))
    assert body["instructions"] == "SYSTEM"
    assert body["tools"] == [{"type": "function", "name": "Read", "description": "Read.",
                              "parameters": {"type": "object"}, "strict": False}]
    assert body["input"] == [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    assert body["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["store"] is False and body["stream"] is True and body["max_output_tokens"] == 700
    plain = body_of(req([Message("user", [TextPart("hi")])]))
    assert "reasoning" not in plain and "include" not in plain


def test_input_mapping_replays_reasoning_verbatim() -> None:
    image = ImagePart("image/png", "UE5H")
    summary = [{"type": "summary_text", "text": "part one"}, {"type": "summary_text", "text": "part two"}]
    messages = [
        Message("user", [TextPart("go"), image]),
        Message("assistant", [
            ThinkingPart("part one\n\npart two", {"openai": {"id": "rs_1", "summary": summary,
                                                            "encrypted_content": "ENC"}}),
            ThinkingPart("unsigned", None),
            TextPart("I will "), TextPart("read."),
            ToolCallPart("call_1", "Read", '{"path":"a"}'),
        ]),
        Message("tool", [ToolResultPart("call_1", "Read", "A", images=[image])]),
    ]
    items = body_of(req(messages))["input"]
    assert items[1:] == [
        {"type": "reasoning", "id": "rs_1", "summary": summary, "encrypted_content": "ENC"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "I will read."}]},
        {"type": "function_call", "call_id": "call_1", "name": "Read", "arguments": '{"path":"a"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": [
            {"type": "input_text", "text": "A"}, {"type": "input_image", "image_url": "data:image/png;base64,UE5H"}]},
    ]
    assert items[0]["content"][1] == {"type": "input_image", "image_url": "data:image/png;base64,UE5H"}


def test_endpoints() -> None:
    assert endpoint("https://api.openai.com/v1") == "https://api.openai.com/v1/responses"
    assert endpoint("https://proxy.example/openai/v1/responses") == "https://proxy.example/openai/v1/responses"


def ev(data: dict) -> bytes:
    return sse(data, event=data["type"])


async def test_stream_details(fake_server, http_client) -> None:
    # Two summary parts, a reasoning item without summary text (encrypted only), a function call
    # whose arguments arrive only in the done events, and an incomplete response.
    fake_server.enqueue(Reply(chunks=[
        ev({"type": "response.created", "response": {"id": "resp_9", "status": "in_progress"}}),
        ev({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_a"}}),
        ev({"type": "response.reasoning_summary_part.added", "item_id": "rs_a", "summary_index": 0}),
        ev({"type": "response.reasoning_summary_text.delta", "item_id": "rs_a", "summary_index": 0, "delta": "one"}),
        ev({"type": "response.reasoning_summary_part.added", "item_id": "rs_a", "summary_index": 1}),
        ev({"type": "response.reasoning_summary_text.delta", "item_id": "rs_a", "summary_index": 1, "delta": "two"}),
        ev({"type": "response.output_item.done", "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_a", "summary": [], "encrypted_content": "E1"}}),
        ev({"type": "response.output_item.done", "output_index": 1,
            "item": {"type": "reasoning", "id": "rs_b", "encrypted_content": "E2"}}),
        ev({"type": "response.output_item.added", "output_index": 2,
            "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "Read", "arguments": ""}}),
        ev({"type": "response.function_call_arguments.done", "item_id": "fc_1", "arguments": '{"path":"z"}'}),
        ev({"type": "response.output_item.done", "output_index": 2,
            "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "Read",
                     "arguments": '{"path":"z"}'}}),
        ev({"type": "response.incomplete", "response": {"id": "resp_9", "status": "incomplete",
                                                         "incomplete_details": {"reason": "max_output_tokens"}}}),
    ]))
    stream = provider(fake_server.url + "/v1", http_client).stream(req([Message("user", [TextPart("x")])]))
    events = joined_deltas([e async for e in stream])
    assert events[:2] == [ThinkingDelta("one\n\ntwo"), ThinkingEnd({"openai": {"id": "rs_a", "summary": [], "encrypted_content": "E1"}})]
    assert events[2] == ThinkingEnd({"openai": {"id": "rs_b", "encrypted_content": "E2"}})
    assert ToolCallArgsDelta(0, "call_1", '{"path":"z"}') in events and ToolCallEnd(0, "call_1") in events
    assert events[-1] == Finish("max_tokens", "resp_9")
