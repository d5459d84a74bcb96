"""Chat Completions streams as OpenAI (and compatible servers with reasoning_content) send them."""
from __future__ import annotations

from typing import Any

import msgspec

from cursor_byok.config import ProviderKind
from cursor_byok.providers import Usage

from .dialect import CallSpec, UsageSpec, sse
from .server import Reply

_CREATED = 1_700_000_000


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, *, rid: str = "chatcmpl-fake1") -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    return sse({"id": rid, "object": "chat.completion.chunk", "created": _CREATED, "model": "fake-model",
                "system_fingerprint": "fp_fake", "choices": choices, "usage": None})


def _usage_chunk(u: UsageSpec, rid: str = "chatcmpl-fake1") -> bytes:
    prompt = u.input + u.cache_read
    return sse({"id": rid, "object": "chat.completion.chunk", "created": _CREATED, "model": "fake-model",
                "choices": [], "usage": {
                    "prompt_tokens": prompt, "completion_tokens": u.output, "total_tokens": prompt + u.output,
                    "prompt_tokens_details": {"cached_tokens": u.cache_read, "audio_tokens": 0},
                    "completion_tokens_details": {"reasoning_tokens": u.reasoning, "audio_tokens": 0,
                                                  "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}})


def _error(status: int, message: str, type_: str, code: str | None, headers: dict[str, str] | None = None) -> Reply:
    body = msgspec.json.encode({"error": {"message": message, "type": type_, "param": None, "code": code}})
    return Reply(status=status, body=body, content_type="application/json", headers=headers or {})


class OpenAIChatDialect:
    kind = ProviderKind.OPENAI_CHAT
    messages_key = "messages"

    def stream(self, chunks: list[bytes], finish: str, usage: UsageSpec) -> Reply:
        head = _chunk({"role": "assistant", "content": "", "refusal": None})
        tail = [_chunk({}, finish), _usage_chunk(usage), b"data: [DONE]\n\n"]
        return Reply(chunks=[head, *chunks, *tail])

    def text(self, pieces: list[str], usage: UsageSpec = UsageSpec()) -> Reply:
        return self.stream([_chunk({"content": p}) for p in pieces], "stop", usage)

    def thinking(self, thoughts: list[str], pieces: list[str], usage: UsageSpec = UsageSpec()) -> Reply:
        chunks = [_chunk({"content": None, "reasoning_content": t}) for t in thoughts]
        chunks += [_chunk({"content": p, "reasoning_content": None}) for p in pieces]
        return self.stream(chunks, "stop", usage)

    def tool_calls(self, calls: list[CallSpec], pieces: list[str] = [], usage: UsageSpec = UsageSpec(), thoughts: list[str] = []) -> Reply:
        chunks = [_chunk({"content": None, "reasoning_content": t}) for t in thoughts]
        chunks += [_chunk({"content": p}) for p in pieces]
        for i, call in enumerate(calls):
            chunks.append(_chunk({"tool_calls": [{"index": i, "id": call.id, "type": "function",
                                                  "function": {"name": call.name, "arguments": ""}}]}))
            for piece in call.arg_pieces:
                chunks.append(_chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
        return self.stream(chunks, "tool_calls", usage)

    def expected_usage(self, usage: UsageSpec) -> Usage:
        return Usage(input_tokens=usage.input + usage.cache_read, output_tokens=usage.output,
                     cache_read_tokens=usage.cache_read, cache_write_tokens=None, reasoning_tokens=usage.reasoning)

    def auth_error(self, echo: str = "") -> Reply:
        return _error(401, f"Incorrect API key provided: {echo}. You can find your API key in your account.",
                      "invalid_request_error", "invalid_api_key")

    def rate_limited(self, headers: dict[str, str]) -> Reply:
        return _error(429, "Rate limit reached for requests. Please try again later.", "requests",
                      "rate_limit_exceeded", headers)

    def overloaded(self) -> Reply:
        return _error(503, "The server is overloaded or not ready yet.", "server_error", None)

    def context_length(self) -> Reply:
        return _error(400, "This model's maximum context length is 128000 tokens. However, your messages "
                      "resulted in 131072 tokens. Please reduce the length of the messages.",
                      "invalid_request_error", "context_length_exceeded")

    def refusal(self) -> Reply:
        pieces = ["I'm sorry, ", "I can't help with that."]
        return self.stream([_chunk({"content": None, "refusal": p}) for p in pieces], "stop", UsageSpec())

    def overloaded_in_stream(self) -> Reply:
        err = sse({"error": {"message": "The server had an error while processing your request.",
                             "type": "server_error", "param": None, "code": "server_is_overloaded"}})
        return Reply(chunks=[err])
