"""OpenAI Chat Completions (and any OpenAI-compatible server) over streaming SSE.

Reasoning text from compatible servers (`reasoning_content` as DeepSeek/Kimi/vLLM send it, or
`reasoning` as OpenRouter does) becomes thinking; it is sent back under the same field on the
assistant message it belongs to.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import msgspec

from .errors import NO_REDACTION, RefusalError, StreamCutError, classify, error_info_from
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
    Usage,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_REPLAY_KEY = "openai_chat"


# ---- wire chunks (only the fields we read; unknown fields are ignored) ---------------------------
# gc=False: decoded JSON is a tree (never a cycle) made per streamed event; the collector need not track it.
class _FunctionDelta(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct, gc=False):
    index: int = 0
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct, gc=False):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None


class _CompletionDetails(msgspec.Struct, gc=False):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None
    prompt_cache_hit_tokens: int | None = None  # DeepSeek's name for cached input


class _Chunk(msgspec.Struct, gc=False):
    choices: list[_Choice] = []
    usage: _Usage | None = None
    error: Any = None


class _FirstChunk(_Chunk, gc=False):
    id: str | None = None  # the response's: read until a chunk has told it, then skipped


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_decode_first_chunk = msgspec.json.Decoder(_FirstChunk).decode


_FINISH: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}


class _Call:
    __slots__ = ("index", "id", "name", "pending", "started")

    def __init__(self, index: int, call_id: str) -> None:
        self.index = index
        self.id = call_id
        self.name: str | None = None
        self.pending: list[str] = []  # argument text seen before the name
        self.started = False


class ChatTranslator:
    """Chat-completion chunks → neutral events."""

    def __init__(self, redact: Callable[[str], str] = NO_REDACTION) -> None:
        self._redact = redact
        self._calls: dict[int, _Call] = {}
        self._open_calls: list[_Call] = []
        self._thinking_field: str | None = None  # set while a reasoning run is open
        self._finish: str | None = None
        self._done = False
        self._usage: _Usage | None = None
        self._response_id: str | None = None
        self._refusal: list[str] = []

    def feed(self, event: str, data: str) -> Sequence[StreamEvent]:
        if data == "[DONE]":
            self._done = True
            return ()
        chunk: _Chunk
        if self._response_id is None:
            chunk = first = _decode_first_chunk(data)
            self._response_id = first.id
        else:
            chunk = _decode_chunk(data)
        if chunk.error is not None:
            raise classify(status=None, info=error_info_from({"error": chunk.error}), redact=self._redact,
                           provider="openai-chat")
        choices = chunk.choices
        if chunk.usage is None:
            if len(choices) == 1 and self._thinking_field is None:
                # Nearly every chunk: one piece of text and nothing else, as the loop below reads it.
                choice = choices[0]
                delta = choice.delta
                if (
                    delta is not None and delta.content and choice.index == 0 and not choice.finish_reason
                    and not delta.reasoning_content and not delta.reasoning and not delta.refusal and not delta.tool_calls
                ):
                    return (TextDelta(delta.content),)
        else:
            self._usage = chunk.usage
        out: list[StreamEvent] = []
        for choice in choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None:
                reasoning = delta.reasoning_content
                field = "reasoning_content"
                if not reasoning and delta.reasoning:
                    reasoning, field = delta.reasoning, "reasoning"
                if reasoning:
                    self._thinking_field = self._thinking_field or field
                    out.append(ThinkingDelta(reasoning))
                if delta.content:
                    if self._thinking_field is not None:
                        self._end_thinking(out)
                    out.append(TextDelta(delta.content))
                if delta.refusal:
                    self._refusal.append(delta.refusal)
                if delta.tool_calls:
                    self._end_thinking(out)
                    for tc in delta.tool_calls:
                        self._tool_delta(tc, out)
            if choice.finish_reason:
                self._finish = choice.finish_reason
                self._end_thinking(out)
                for call in self._open_calls:
                    if not call.started:
                        self._start(call, out)
                    out.append(ToolCallEnd(call.index, call.id))
                self._open_calls = []
        return out

    def close(self) -> Sequence[StreamEvent]:
        if self._finish is None and not self._done:
            raise StreamCutError("openai-chat: stream ended before a finish reason")
        if self._refusal or self._finish == "content_filter":
            text = "".join(self._refusal) or "the response was blocked by the provider's content filter"
            raise RefusalError(f"openai-chat: {text}")
        out: list[StreamEvent] = []
        self._end_thinking(out)
        for call in self._open_calls:  # [DONE] without a finish reason
            if not call.started:
                self._start(call, out)
            out.append(ToolCallEnd(call.index, call.id))
        if self._usage is not None:
            out.append(_usage(self._usage))
        if self._finish in _FINISH:
            stop = _FINISH[self._finish]
        elif self._finish is None:
            stop = "tool_use" if self._calls else "end_turn"
        else:
            stop = "other"
        if stop == "end_turn" and self._calls:
            stop = "tool_use"  # some compatible servers say "stop" after tool calls
        out.append(Finish(stop, self._response_id))
        return out

    def _end_thinking(self, out: list[StreamEvent]) -> None:
        if self._thinking_field is not None:
            out.append(ThinkingEnd({_REPLAY_KEY: {"field": self._thinking_field}}))
            self._thinking_field = None

    def _tool_delta(self, tc: _ToolCallDelta, out: list[StreamEvent]) -> None:
        call = self._calls.get(tc.index)
        if call is None:
            call = _Call(len(self._calls), tc.id or f"call_{uuid.uuid4().hex[:24]}")
            self._calls[tc.index] = call
            self._open_calls.append(call)
        fn = tc.function
        if fn is None:
            return
        if fn.name and not call.started:
            call.name = fn.name
            self._start(call, out)
        if fn.arguments:
            if call.started:
                out.append(ToolCallArgsDelta(call.index, call.id, fn.arguments))
            else:
                call.pending.append(fn.arguments)

    @staticmethod
    def _start(call: _Call, out: list[StreamEvent]) -> None:
        call.started = True
        out.append(ToolCallStart(call.index, call.id, call.name or ""))
        if call.pending:
            out.append(ToolCallArgsDelta(call.index, call.id, "".join(call.pending)))
            call.pending = []


def _usage(u: _Usage) -> Usage:
    cached = u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else None
    if cached is None:
        cached = u.prompt_cache_hit_tokens
    return Usage(
        input_tokens=u.prompt_tokens,
        output_tokens=u.completion_tokens,
        cache_read_tokens=cached,
        cache_write_tokens=u.prompt_tokens_details.cache_write_tokens if u.prompt_tokens_details else None,
        reasoning_tokens=u.completion_tokens_details.reasoning_tokens if u.completion_tokens_details else None,
    )


# ---- request -------------------------------------------------------------------------------------
def _user_content(parts: Sequence[Any], text: msgspec.Raw | None) -> str | msgspec.Raw | list[dict[str, Any]]:
    if len(parts) == 1 and type(parts[0]) is TextPart:
        return parts[0].text if text is None else text
    content: list[dict[str, Any]] = []
    for part in parts:
        if type(part) is TextPart:
            content.append({"type": "text", "text": part.text})
        elif type(part) is ImagePart:
            content.append({"type": "image_url", "image_url": {"url": part.data_url}})
    return content


def _assistant(parts: Sequence[Any]) -> dict[str, Any]:
    text: list[str] = []
    reasoning: list[str] = []
    field: str | None = None
    calls: list[dict[str, Any]] = []
    for part in parts:
        kind = type(part)
        if kind is TextPart:
            text.append(part.text)
        elif kind is ToolCallPart:
            calls.append({"id": part.id, "type": "function",
                          "function": {"name": part.name, "arguments": part.arguments}})
        elif kind is ThinkingPart and part.replay and _REPLAY_KEY in part.replay:
            field = field or str(part.replay[_REPLAY_KEY].get("field", "reasoning_content"))
            reasoning.append(part.text)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if field is not None:
        message[field] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message


def chat_items(message: Message, text: msgspec.Raw | None = None) -> list[dict[str, Any]]:
    """One history message as Chat Completions messages (`text`: its lone text as JSON, if known)."""
    if message.role == "user":
        return [{"role": "user", "content": _user_content(message.parts, text)}]
    if message.role == "assistant":
        return [_assistant(message.parts)]
    out: list[dict[str, Any]] = []
    images: list[tuple[ToolResultPart, ImagePart]] = []
    for part in message.parts:
        if type(part) is ToolResultPart:
            out.append({"role": "tool", "tool_call_id": part.call_id, "content": part.content})
            images.extend((part, image) for image in part.images)
    if images:
        # Tool messages carry text only; images follow in one user message, in call order.
        content: list[dict[str, Any]] = []
        for part, image in images:
            content.append({"type": "text", "text": f"Image returned by {part.name} ({part.call_id}):"})
            content.append({"type": "image_url", "image_url": {"url": image.data_url}})
        out.append({"role": "user", "content": content})
    return out


class OpenAIChatProvider(HttpStreamProvider):
    family = "openai-chat"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # OpenAI's own API wants max_completion_tokens (reasoning models reject max_tokens); most
        # compatible servers know only max_tokens.
        official = urlsplit(self.url).hostname == "api.openai.com"
        self._max_tokens_key = "max_completion_tokens" if official else "max_tokens"

    def endpoint(self, base_url: str) -> str:
        base = (base_url or DEFAULT_BASE_URL).rstrip("/")
        return base if base.endswith("/chat/completions") else base + "/chat/completions"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": request.model}
        tools, system = request.tools, request.system
        if tools:
            body["tools"] = msgspec.Raw(self._fragments.fixed(tools, lambda: [
                {"type": "function",
                 "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
                for t in tools
            ]))
        lead = self._fragments.fixed(system, lambda: {"role": "system", "content": system}) if system else b""
        body["messages"] = self._fragments.messages(request.messages, chat_items, lead)
        body[self._max_tokens_key] = request.max_tokens
        if request.effort:
            body["reasoning_effort"] = request.effort
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        return body

    def new_translator(self) -> StreamTranslator:
        return ChatTranslator(self._redact)
