"""Anthropic Messages streams as the API sends them (event lines, pings, signatures)."""
from __future__ import annotations

from typing import Any

import msgspec

from cursor_byok.config import ProviderKind
from cursor_byok.providers import Usage

from .dialect import CallSpec, UsageSpec, sse
from .server import Reply


def _ev(data: dict[str, Any]) -> bytes:
    return sse(data, event=data["type"])


def _start(usage: UsageSpec, mid: str = "msg_fake1") -> bytes:
    return _ev({"type": "message_start", "message": {
        "id": mid, "type": "message", "role": "assistant", "model": "claude-fake", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": usage.input, "cache_creation_input_tokens": usage.cache_write,
                  "cache_read_input_tokens": usage.cache_read, "output_tokens": 1}}})


def _block_start(index: int, block: dict[str, Any]) -> bytes:
    return _ev({"type": "content_block_start", "index": index, "content_block": block})


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return _ev({"type": "content_block_delta", "index": index, "delta": delta})


def _stop(index: int) -> bytes:
    return _ev({"type": "content_block_stop", "index": index})


def _text_block(index: int, pieces: list[str]) -> list[bytes]:
    return [_block_start(index, {"type": "text", "text": ""}),
            *[_delta(index, {"type": "text_delta", "text": p}) for p in pieces], _stop(index)]


def _error(status: int, type_: str, message: str, headers: dict[str, str] | None = None) -> Reply:
    body = msgspec.json.encode({"type": "error", "error": {"type": type_, "message": message},
                                "request_id": "req_fake"})
    return Reply(status=status, body=body, content_type="application/json", headers=headers or {})


SIGNATURE = "EqQBCkgIARABGAIiQL2fake-signature-bytes=="


class AnthropicDialect:
    kind = ProviderKind.ANTHROPIC
    messages_key = "messages"

    def stream(self, blocks: list[bytes], stop: str, usage: UsageSpec) -> Reply:
        tail = [_ev({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                     "usage": {"output_tokens": usage.output}}),
                _ev({"type": "message_stop"})]
        return Reply(chunks=[_start(usage), _ev({"type": "ping"}), *blocks, *tail])

    def text(self, pieces: list[str], usage: UsageSpec = UsageSpec()) -> Reply:
        return self.stream(_text_block(0, pieces), "end_turn", usage)

    def thinking(self, thoughts: list[str], pieces: list[str], usage: UsageSpec = UsageSpec()) -> Reply:
        blocks = [_block_start(0, {"type": "thinking", "thinking": "", "signature": ""})]
        blocks += [_delta(0, {"type": "thinking_delta", "thinking": t}) for t in thoughts]
        blocks += [_delta(0, {"type": "signature_delta", "signature": SIGNATURE}), _stop(0)]
        blocks += _text_block(1, pieces)
        return self.stream(blocks, "end_turn", usage)

    def tool_calls(self, calls: list[CallSpec], pieces: list[str] = [], usage: UsageSpec = UsageSpec()) -> Reply:
        blocks: list[bytes] = []
        index = 0
        if pieces:
            blocks += _text_block(0, pieces)
            index = 1
        for call in calls:
            blocks.append(_block_start(index, {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}))
            blocks.append(_delta(index, {"type": "input_json_delta", "partial_json": ""}))
            blocks += [_delta(index, {"type": "input_json_delta", "partial_json": p}) for p in call.arg_pieces]
            blocks.append(_stop(index))
            index += 1
        return self.stream(blocks, "tool_use", usage)

    def expected_usage(self, usage: UsageSpec) -> Usage:
        return Usage(input_tokens=usage.input + usage.cache_read + usage.cache_write, output_tokens=usage.output,
                     cache_read_tokens=usage.cache_read, cache_write_tokens=usage.cache_write, reasoning_tokens=None)

    def auth_error(self, echo: str = "") -> Reply:
        return _error(401, "authentication_error", f"invalid x-api-key {echo}".strip())

    def rate_limited(self, headers: dict[str, str]) -> Reply:
        return _error(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit",
                      headers)

    def overloaded(self) -> Reply:
        return _error(529, "overloaded_error", "Overloaded")

    def context_length(self) -> Reply:
        return _error(400, "invalid_request_error", "prompt is too long: 215000 tokens > 200000 maximum")

    def refusal(self) -> Reply:
        return self.stream(_text_block(0, ["I can't help with that."]), "refusal", UsageSpec())

    def overloaded_in_stream(self) -> Reply:
        return Reply(chunks=[_start(UsageSpec()),
                             _ev({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})])
