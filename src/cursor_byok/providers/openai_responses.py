"""OpenAI Responses over streaming SSE, stateless (`store: false`).

Reasoning items are requested with encrypted content whenever an effort is set and sent back
verbatim (id, summary, encrypted_content) so the model keeps its reasoning across tool calls
without server-side state.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from .errors import NO_REDACTION, ErrorInfo, RefusalError, StreamCutError, classify, error_info_from
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
_REPLAY_KEY = "openai"


# ---- wire events ---------------------------------------------------------------------------------
# gc=False: decoded JSON is a tree (never a cycle) made per streamed event; the collector need not track it.
class _Item(msgspec.Struct, gc=False):
    type: str = ""
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    encrypted_content: str | None = None
    summary: list[Any] | None = None


class _InputDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None


class _OutputDetails(msgspec.Struct, gc=False):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct, gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    input_tokens_details: _InputDetails | None = None
    output_tokens_details: _OutputDetails | None = None


class _Incomplete(msgspec.Struct, gc=False):
    reason: str | None = None


class _Response(msgspec.Struct, gc=False):
    id: str | None = None
    status: str | None = None
    usage: _Usage | None = None
    incomplete_details: _Incomplete | None = None
    error: Any = None


class _Event(msgspec.Struct, gc=False):
    type: str = ""
    delta: Any = None
    item_id: str | None = None
    output_index: int | None = None
    summary_index: int | None = None
    item: _Item | None = None
    response: _Response | None = None
    arguments: str | None = None
    code: Any = None
    message: str | None = None


_decode_event = msgspec.json.Decoder(_Event).decode


class _Call:
    __slots__ = ("index", "id", "got_args", "ended")

    def __init__(self, index: int, call_id: str) -> None:
        self.index = index
        self.id = call_id
        self.got_args = False
        self.ended = False


class ResponsesTranslator:
    """Responses stream events → neutral events."""

    def __init__(self, redact: Callable[[str], str] = NO_REDACTION) -> None:
        self._redact = redact
        self._calls: dict[str, _Call] = {}  # by output item id
        self._refusal: list[str] = []
        self._response_id: str | None = None
        self._final: _Response | None = None
        self._final_type = ""

    def feed(self, event: str, data: str) -> Sequence[StreamEvent]:
        ev = _decode_event(data)
        kind = ev.type
        if kind == "response.output_text.delta":
            return (TextDelta(ev.delta),) if ev.delta else ()
        if kind == "response.function_call_arguments.delta":
            call = self._calls.get(ev.item_id or "")
            if call is None or not ev.delta:
                return ()
            call.got_args = True
            return (ToolCallArgsDelta(call.index, call.id, ev.delta),)
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            return (ThinkingDelta(ev.delta),) if ev.delta else ()
        if kind == "response.reasoning_summary_part.added":
            # Separate summary parts in the streamed text; the replay keeps the parts as they came.
            return (ThinkingDelta("\n\n"),) if ev.summary_index else ()
        if kind == "response.output_item.added":
            return self._item_added(ev.item)
        if kind == "response.output_item.done":
            return self._item_done(ev.item)
        if kind == "response.refusal.delta":
            if isinstance(ev.delta, str):
                self._refusal.append(ev.delta)
            return ()
        if kind == "response.created" or kind == "response.in_progress":
            if ev.response is not None and ev.response.id:
                self._response_id = ev.response.id
            return ()
        if kind in ("response.completed", "response.incomplete"):
            self._final, self._final_type = ev.response, kind
            return ()
        if kind == "response.failed":
            error = ev.response.error if ev.response is not None else None
            info = error_info_from({"error": error}) if error else ErrorInfo(message="response failed")
            raise classify(status=None, info=info, redact=self._redact, provider="openai-responses")
        if kind == "error":
            code = str(ev.code) if ev.code is not None else None
            raise classify(status=None, info=ErrorInfo(message=ev.message or "", code=code),
                           redact=self._redact, provider="openai-responses")
        return ()

    def close(self) -> Sequence[StreamEvent]:
        final = self._final
        if final is None:
            raise StreamCutError("openai-responses: stream ended before the response completed")
        reason = final.incomplete_details.reason if final.incomplete_details else None
        if self._refusal or reason == "content_filter":
            text = "".join(self._refusal) or "the response was blocked by the provider's content filter"
            raise RefusalError(f"openai-responses: {text}")
        out: list[StreamEvent] = []
        for call in self._calls.values():
            if not call.ended:
                call.ended = True
                out.append(ToolCallEnd(call.index, call.id))
        if final.usage is not None:
            u = final.usage
            out.append(Usage(
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                cache_read_tokens=u.input_tokens_details.cached_tokens if u.input_tokens_details else None,
                reasoning_tokens=u.output_tokens_details.reasoning_tokens if u.output_tokens_details else None,
            ))
        stop: StopReason
        if self._final_type == "response.incomplete":
            stop = "max_tokens" if reason == "max_output_tokens" else "other"
        else:
            stop = "tool_use" if self._calls else "end_turn"
        out.append(Finish(stop, final.id or self._response_id))
        return out

    def _item_added(self, item: _Item | None) -> Sequence[StreamEvent]:
        if item is None or item.type != "function_call":
            return ()
        call = _Call(len(self._calls), item.call_id or item.id or f"call_{len(self._calls)}")
        self._calls[item.id or call.id] = call
        out: list[StreamEvent] = [ToolCallStart(call.index, call.id, item.name or "")]
        if item.arguments:
            call.got_args = True
            out.append(ToolCallArgsDelta(call.index, call.id, item.arguments))
        return out

    def _item_done(self, item: _Item | None) -> Sequence[StreamEvent]:
        if item is None:
            return ()
        if item.type == "reasoning":
            replay: dict[str, Any] = {"id": item.id}
            if item.summary is not None:
                replay["summary"] = item.summary
            if item.encrypted_content is not None:
                replay["encrypted_content"] = item.encrypted_content
            return (ThinkingEnd({_REPLAY_KEY: replay}),)
        if item.type == "function_call":
            call = self._calls.get(item.id or item.call_id or "")
            if call is None or call.ended:
                return ()
            call.ended = True
            out: list[StreamEvent] = []
            if not call.got_args and item.arguments:
                call.got_args = True
                out.append(ToolCallArgsDelta(call.index, call.id, item.arguments))
            out.append(ToolCallEnd(call.index, call.id))
            return out
        return ()


# ---- request -------------------------------------------------------------------------------------
def _reasoning_item(part: ThinkingPart) -> dict[str, Any] | None:
    replay = (part.replay or {}).get(_REPLAY_KEY)
    if not replay or not replay.get("id"):
        return None  # thinking from another provider cannot be replayed here
    item: dict[str, Any] = {"type": "reasoning", "id": replay["id"]}
    summary = replay.get("summary")
    if summary is None:
        summary = [{"type": "summary_text", "text": part.text}] if part.text else []
    item["summary"] = summary
    if replay.get("encrypted_content") is not None:
        item["encrypted_content"] = replay["encrypted_content"]
    return item


def responses_items(message: Message, text: msgspec.Raw | None = None) -> list[dict[str, Any]]:
    """One history message as Responses API input items (`text`: its lone text as JSON, if known)."""
    items: list[dict[str, Any]] = []
    if message.role == "user":
        content: list[dict[str, Any]] = []
        for part in message.parts:
            if type(part) is TextPart:
                content.append({"type": "input_text", "text": part.text if text is None else text})
            elif type(part) is ImagePart:
                content.append({"type": "input_image", "image_url": part.data_url})
        items.append({"type": "message", "role": "user", "content": content})
    elif message.role == "assistant":
        text: list[str] = []

        def flush_text() -> None:
            if text:
                items.append({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": "".join(text)}]})
                text.clear()

        for part in message.parts:
            kind = type(part)
            if kind is TextPart:
                text.append(part.text)
                continue
            flush_text()
            if kind is ToolCallPart:
                items.append({"type": "function_call", "call_id": part.id, "name": part.name,
                              "arguments": part.arguments})
            elif kind is ThinkingPart:
                reasoning = _reasoning_item(part)
                if reasoning is not None:
                    items.append(reasoning)
        flush_text()
    else:
        for part in message.parts:
            if type(part) is not ToolResultPart:
                continue
            output: str | list[dict[str, Any]] = part.content
            if part.images:
                output = [{"type": "input_text", "text": part.content}] if part.content else []
                output.extend({"type": "input_image", "image_url": i.data_url} for i in part.images)
            items.append({"type": "function_call_output", "call_id": part.call_id, "output": output})
    return items


class OpenAIResponsesProvider(HttpStreamProvider):
    family = "openai-responses"

    def endpoint(self, base_url: str) -> str:
        base = (base_url or DEFAULT_BASE_URL).rstrip("/")
        return base if base.endswith("/responses") else base + "/responses"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": request.model}
        if request.system:
            body["instructions"] = request.system
        tools = request.tools
        if tools:
            body["tools"] = msgspec.Raw(self._fragments.fixed(tools, lambda: [
                {"type": "function", "name": t.name, "description": t.description,
                 "parameters": t.parameters, "strict": False}
                for t in tools
            ]))
        body["input"] = self._fragments.messages(request.messages, responses_items)
        body["max_output_tokens"] = request.max_tokens
        if request.effort:
            body["reasoning"] = {"effort": request.effort, "summary": "auto"}
            body["include"] = ["reasoning.encrypted_content"]
        body["store"] = False
        body["stream"] = True
        return body

    def new_translator(self) -> StreamTranslator:
        return ResponsesTranslator(self._redact)
