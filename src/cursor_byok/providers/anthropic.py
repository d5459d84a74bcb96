"""Anthropic Messages over streaming SSE.

Prompt caching: explicit breakpoints on the system prompt and the last tool (both byte-stable), and
the request-level `cache_control`, which puts the moving breakpoint on the last cacheable block
without touching the bytes of earlier messages. `extra_params = {"cache_control": None}` removes
it for Anthropic-compatible servers that do not accept it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from .errors import NO_REDACTION, ErrorInfo, RefusalError, StreamCutError, classify
from .transport import HttpStreamProvider, StreamTranslator
from .types import (
    Finish,
    ImagePart,
    Message,
    ModelRequest,
    StopReason,
    StreamEvent,
    TextDelta,
    TextPart,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingPart,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallPart,
    ToolCallStart,
    ToolResultPart,
    ToolSchema,
    Usage,
)

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
_EPHEMERAL = {"type": "ephemeral"}
_REPLAY_KEY = "anthropic"
_MIN_THINKING_BUDGET = 1024


# ---- wire events ---------------------------------------------------------------------------------
# gc=False: decoded JSON is a tree (never a cycle) made per streamed event; the collector need not track it.
class _Usage(msgspec.Struct, gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _Message(msgspec.Struct, gc=False):
    id: str | None = None
    usage: _Usage | None = None


class _Block(msgspec.Struct, gc=False):
    type: str = ""
    id: str | None = None
    name: str | None = None
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None


class _Delta(msgspec.Struct, gc=False):
    type: str | None = None
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None


class _Error(msgspec.Struct, gc=False):
    type: str | None = None
    message: str = ""


class _Event(msgspec.Struct, gc=False):
    type: str = ""
    index: int = 0
    message: _Message | None = None
    content_block: _Block | None = None
    delta: _Delta | None = None
    usage: _Usage | None = None
    error: _Error | None = None


_decode_event = msgspec.json.Decoder(_Event).decode

_STOP: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
}


class _Open:
    __slots__ = ("kind", "call_index", "id", "signature", "data")

    def __init__(self, kind: str, call_index: int = -1, call_id: str = "", data: str | None = None) -> None:
        self.kind = kind
        self.call_index = call_index
        self.id = call_id
        self.signature: list[str] = []
        self.data = data


class AnthropicTranslator:
    """Messages stream events → neutral events."""

    def __init__(self, redact: Callable[[str], str] = NO_REDACTION) -> None:
        self._redact = redact
        self._blocks: dict[int, _Open] = {}
        self._calls = 0
        self._usage: dict[str, int] = {}
        self._stop: str | None = None
        self._message_id: str | None = None

    def feed(self, event: str, data: str) -> Sequence[StreamEvent]:
        ev = _decode_event(data)
        kind = ev.type
        if kind == "content_block_delta":
            delta = ev.delta
            if delta is None:
                return ()
            dtype = delta.type
            if dtype == "text_delta":
                return (TextDelta(delta.text),) if delta.text else ()
            if dtype == "thinking_delta":
                return (ThinkingDelta(delta.thinking),) if delta.thinking else ()
            block = self._blocks.get(ev.index)
            if block is None:
                return ()
            if dtype == "input_json_delta":
                if delta.partial_json:
                    return (ToolCallArgsDelta(block.call_index, block.id, delta.partial_json),)
            elif dtype == "signature_delta" and delta.signature:
                block.signature.append(delta.signature)
            return ()
        if kind == "content_block_start":
            return self._start(ev.index, ev.content_block)
        if kind == "content_block_stop":
            return self._stop_block(ev.index)
        if kind == "message_start":
            if ev.message is not None:
                self._message_id = ev.message.id
                self._merge_usage(ev.message.usage)
            return ()
        if kind == "message_delta":
            if ev.delta is not None and ev.delta.stop_reason:
                self._stop = ev.delta.stop_reason
            self._merge_usage(ev.usage)
            return ()
        if kind == "error":
            err = ev.error or _Error()
            raise classify(status=None, info=ErrorInfo(message=err.message, type=err.type),
                           redact=self._redact, provider="anthropic")
        return ()  # ping, message_stop and event types added later

    def close(self) -> Sequence[StreamEvent]:
        if self._stop is None:
            raise StreamCutError("anthropic: stream ended before the message's stop reason")
        if self._stop == "refusal":
            raise RefusalError("anthropic: the model declined to continue (stop_reason: refusal)")
        out: list[StreamEvent] = []
        for index in sorted(self._blocks):
            out.extend(self._stop_block(index))
        u = self._usage
        if u:
            cache_read = u.get("cache_read_input_tokens")
            cache_write = u.get("cache_creation_input_tokens")
            uncached = u.get("input_tokens")
            total_input = None
            if uncached is not None or cache_read is not None or cache_write is not None:
                total_input = (uncached or 0) + (cache_read or 0) + (cache_write or 0)
            out.append(Usage(
                input_tokens=total_input,
                output_tokens=u.get("output_tokens"),
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
            ))
        out.append(Finish(_STOP.get(self._stop, "other"), self._message_id))
        return out

    def _merge_usage(self, usage: _Usage | None) -> None:
        if usage is None:
            return
        for field in usage.__struct_fields__:
            value = getattr(usage, field)
            if value is not None:
                self._usage[field] = value  # message_delta counts are cumulative

    def _start(self, index: int, block: _Block | None) -> Sequence[StreamEvent]:
        if block is None:
            return ()
        btype = block.type
        if btype == "text":
            return (TextDelta(block.text),) if block.text else ()
        if btype == "thinking":
            opened = _Open("thinking")
            if block.signature:
                opened.signature.append(block.signature)
            self._blocks[index] = opened
            return (ThinkingDelta(block.thinking),) if block.thinking else ()
        if btype == "redacted_thinking":
            self._blocks[index] = _Open("redacted", data=block.data or "")
            return ()
        if btype == "tool_use":
            call = _Open("tool", self._calls, block.id or f"toolu_{self._calls}")
            self._calls += 1
            self._blocks[index] = call
            return (ToolCallStart(call.call_index, call.id, block.name or ""),)
        return ()  # server tool blocks and other types are not part of the neutral model

    def _stop_block(self, index: int) -> Sequence[StreamEvent]:
        block = self._blocks.pop(index, None)
        if block is None:
            return ()
        if block.kind == "tool":
            return (ToolCallEnd(block.call_index, block.id),)
        if block.kind == "thinking":
            return (ThinkingEnd({_REPLAY_KEY: {"signature": "".join(block.signature)}}),)
        return (ThinkingEnd({_REPLAY_KEY: {"redacted_data": block.data}}),)


# ---- request -------------------------------------------------------------------------------------
def _image(image: ImagePart) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": image.data_base64}}


def _tool_input(arguments: str) -> Any:
    if not arguments.strip():
        return {}
    try:
        value = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        value = None
    # tool_use.input must be an object; keep what the model wrote so the transcript stays honest.
    return value if isinstance(value, dict) else {"_invalid_arguments": arguments}


def _blocks(message: Message, text: msgspec.Raw | None) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in message.parts:
        kind = type(part)
        if kind is TextPart:
            if part.text:  # the API rejects empty text blocks
                blocks.append({"type": "text", "text": part.text if text is None else text})
        elif kind is ImagePart:
            blocks.append(_image(part))
        elif kind is ToolCallPart:
            blocks.append({"type": "tool_use", "id": part.id, "name": part.name, "input": _tool_input(part.arguments)})
        elif kind is ToolResultPart:
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": part.call_id}
            if part.images:
                content: list[dict[str, Any]] = [{"type": "text", "text": part.content}] if part.content else []
                content.extend(_image(image) for image in part.images)
                block["content"] = content
            elif part.content:
                block["content"] = part.content
            if part.is_error:
                block["is_error"] = True
            blocks.append(block)
        elif kind is ThinkingPart:
            replay = (part.replay or {}).get(_REPLAY_KEY)
            if not replay:
                continue  # thinking from another provider cannot be verified by this one
            if "redacted_data" in replay:
                blocks.append({"type": "redacted_thinking", "data": replay["redacted_data"]})
            else:
                blocks.append({"type": "thinking", "thinking": part.text, "signature": replay.get("signature", "")})
    return blocks


def anthropic_items(message: Message, text: msgspec.Raw | None = None) -> list[dict[str, Any]]:
    """One history message as a Messages API message (none if nothing in it can be sent; `text`:
    its lone text as JSON, if known)."""
    blocks = _blocks(message, text)
    return [{"role": "assistant" if message.role == "assistant" else "user", "content": blocks}] if blocks else []


def _tools(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    out = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]
    out[-1]["cache_control"] = _EPHEMERAL
    return out


class AnthropicProvider(HttpStreamProvider):
    family = "anthropic"

    def endpoint(self, base_url: str) -> str:
        base = (base_url or DEFAULT_BASE_URL).rstrip("/")
        if base.endswith("/messages"):
            return base
        return base + "/messages" if base.endswith("/v1") else base + "/v1/messages"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        max_tokens = request.max_tokens
        body: dict[str, Any] = {"model": request.model}
        system, tools = request.system, request.tools
        if system:
            body["system"] = msgspec.Raw(self._fragments.fixed(
                system, lambda: [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
            ))
        if tools:
            body["tools"] = msgspec.Raw(self._fragments.fixed(tools, lambda: _tools(tools)))
        body["messages"] = self._fragments.messages(request.messages, anthropic_items)
        body["cache_control"] = _EPHEMERAL
        if request.thinking_budget:
            budget = max(_MIN_THINKING_BUDGET, request.thinking_budget)
            if max_tokens <= budget:
                max_tokens = budget + _MIN_THINKING_BUDGET  # the answer needs room beyond the budget
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        if request.effort:
            body["output_config"] = {"effort": request.effort}
        body["max_tokens"] = max_tokens
        body["stream"] = True
        return body

    def new_translator(self) -> StreamTranslator:
        return AnthropicTranslator(self._redact)
