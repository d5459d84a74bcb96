"""Provider-neutral conversation parts, requests and stream events.

These are the only shapes that cross the provider boundary: the run engine builds `ModelRequest`s
from `Message`s and consumes the stream events below; each adapter maps them to and from its wire
format. Parts are tagged (`{"type": "text", ...}`) so a list of them round-trips through
`msgspec.json` for persistence.
"""
from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Hashable, Sequence
from typing import Any, Literal, Union

import msgspec

from .errors import ProviderError


# Parts are not tracked by the cycle collector (gc=False): a loaded history's parts would be walked
# again by each middle and full collection, and they hold text and JSON data, never a cycle.
class TextPart(msgspec.Struct, frozen=True, gc=False, tag_field="type", tag="text"):
    text: str


class ImagePart(msgspec.Struct, frozen=True, gc=False, tag_field="type", tag="image"):
    media_type: str  # e.g. "image/png"
    data_base64: str

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.data_base64}"


class ThinkingPart(msgspec.Struct, frozen=True, gc=False, tag_field="type", tag="thinking"):
    text: str
    # Provider data that must be sent back verbatim on the next request, keyed by provider family:
    # {"anthropic": {"signature": ...}} | {"anthropic": {"redacted_data": ...}}
    # {"openai": {"id": ..., "encrypted_content": ..., "summary": [...]}}
    # {"openai_chat": {"field": "reasoning_content"}}
    replay: dict[str, Any] | None = None


class ToolCallPart(msgspec.Struct, frozen=True, gc=False, tag_field="type", tag="tool_call"):
    id: str
    name: str
    arguments: str  # raw JSON text exactly as the model produced it


class ToolResultPart(msgspec.Struct, frozen=True, gc=False, tag_field="type", tag="tool_result"):
    call_id: str
    name: str
    content: str
    is_error: bool = False
    images: list[ImagePart] = []


Part = Union[TextPart, ImagePart, ThinkingPart, ToolCallPart, ToolResultPart]
Role = Literal["user", "assistant", "tool"]


class Message(msgspec.Struct, frozen=True, weakref=True):
    """One history message. A "tool" message holds only ToolResultParts. (Weak-referenceable: an
    adapter keeps a message's encoded form exactly as long as the message lives.)"""

    role: Role
    parts: list[Part]


class KeyedMessages(Sequence[Message]):
    """Messages of one source (a conversation's history) that each come with a key naming that very
    message for as long as the process runs (the same key, the same message), whatever object holds
    them: an adapter keeps one source's encoded messages as one prefix, and a history read again
    whose first messages are the kept ones gets those bytes without being decoded.

    A source's keys are unique, and each sequence of it is one run of the source's append-only log,
    after at most one earlier message of that log (a compaction's kept context): so a sequence's
    first `n` messages are another's first `n` exactly when its first and its `n`-th keys are
    those of the other's (two keys, whatever the length)."""

    __slots__ = ()

    @abstractmethod
    def source(self) -> Hashable:
        """What the messages are of: an adapter keeps one encoded prefix per source."""

    @abstractmethod
    def key(self, index: int) -> str: ...

    def with_text(self, index: int) -> tuple[Message, msgspec.Raw | None]:
        """The index-th message, and its lone text as a JSON string exactly as msgspec writes that
        str when the source holds it so already (a conversation's entry as the store got it): an
        adapter splices it rather than escaping the text again. None: encode it."""
        return self[index], None


class ToolSchema(msgspec.Struct, frozen=True):
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    model: str  # the provider's model id
    system: str
    messages: Sequence[Message]  # a KeyedMessages, or a plain list
    tools: list[ToolSchema] = []
    max_tokens: int = 4096
    effort: str | None = None
    thinking_budget: int | None = None
    # Merged over the adapter's request body (after the model's configured extra_params); a value of
    # None removes that key from the body.
    extra_params: dict[str, Any] = {}


# ---- stream events -------------------------------------------------------------------------------
# gc=False: events hold only strings, ints and plain dicts, never cycles, and are created per token.

StopReason = Literal["end_turn", "tool_use", "max_tokens", "refusal", "other"]


class TextDelta(msgspec.Struct, frozen=True, gc=False):
    text: str


class ThinkingDelta(msgspec.Struct, frozen=True, gc=False):
    text: str


class ThinkingEnd(msgspec.Struct, frozen=True, gc=False):
    """Closes the current thinking block; `replay` is what ThinkingPart.replay must carry."""

    replay: dict[str, Any] | None = None


class ToolCallStart(msgspec.Struct, frozen=True, gc=False):
    index: int  # 0-based position of the call within this model response
    id: str
    name: str


class ToolCallArgsDelta(msgspec.Struct, frozen=True, gc=False):
    index: int
    id: str
    delta: str


class ToolCallEnd(msgspec.Struct, frozen=True, gc=False):
    index: int
    id: str


class Usage(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """Token counts of one provider call. `input_tokens` is the whole prompt, cache reads and writes
    included (cache_read_tokens and cache_write_tokens are parts of it), for every provider."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None


class Finish(msgspec.Struct, frozen=True, gc=False):
    """Last event of a successful stream. Adapters raise RefusalError instead of finishing with
    "refusal"; the value stays in StopReason for callers that map errors back to a stop reason."""

    stop_reason: StopReason
    response_id: str | None = None


StreamEvent = Union[
    TextDelta, ThinkingDelta, ThinkingEnd, ToolCallStart, ToolCallArgsDelta, ToolCallEnd, Usage, Finish
]


class CallError(msgspec.Struct, frozen=True):
    """How a provider call failed, as its record tells it. Not the exception itself: its traceback's
    frames hold the call, and the run around it, until the cycle collector next runs."""

    kind: str  # an ErrorKind value, "canceled" or "internal"
    message: str
    status: int | None = None
    request_id: str | None = None

    @classmethod
    def of(cls, exc: BaseException) -> CallError:
        if isinstance(exc, ProviderError):
            return cls(exc.kind.value, exc.message, exc.status, exc.request_id)
        if isinstance(exc, asyncio.CancelledError):
            return cls("canceled", "the run was cancelled during the call")
        return cls("internal", type(exc).__name__, getattr(exc, "status", None), getattr(exc, "request_id", None))


class ProviderCall:
    """What one provider call did, filled in as it happens: by the adapter (attempts, the HTTP status,
    when the response head came, the provider's id for the request, and in detailed mode the bodies,
    key redacted) and by whoever drives the stream (the rest). Observation only: nothing reads it to
    decide anything. Times are `time.monotonic_ns()` values, 0 while they have not happened."""

    __slots__ = (
        "purpose", "step", "keep_bodies", "provider_kind", "upstream_model", "attempts", "status",
        "provider_request_id", "started_ns", "response_ns", "first_event_ns", "first_token_ns", "ended_ns",
        "usage", "stop_reason", "error", "request_body", "response_body",
    )

    def __init__(self, purpose: str = "cycle", step: int = 0, *, keep_bodies: bool = False) -> None:
        self.purpose = purpose  # "cycle" (a model step), "compaction" (a summary) or "test"
        self.step = step
        self.keep_bodies = keep_bodies
        self.provider_kind = ""
        self.upstream_model = ""
        self.attempts = 0
        self.status: int | None = None
        self.provider_request_id: str | None = None
        self.started_ns = 0
        self.response_ns = 0
        self.first_event_ns = 0
        self.first_token_ns = 0  # first text, thinking or tool call
        self.ended_ns = 0
        self.usage: Usage | None = None
        self.stop_reason: str | None = None
        self.error: CallError | None = None
        self.request_body: bytes | None = None
        self.response_body: bytearray | None = None


def add_usage(total: Usage | None, more: Usage | None) -> Usage | None:
    """Field-wise sum; a field stays None only while no call reported it."""
    if more is None:
        return total
    if total is None:
        return more

    def _sum(a: int | None, b: int | None) -> int | None:
        if a is None:
            return b
        return a if b is None else a + b

    return Usage(
        input_tokens=_sum(total.input_tokens, more.input_tokens),
        output_tokens=_sum(total.output_tokens, more.output_tokens),
        cache_read_tokens=_sum(total.cache_read_tokens, more.cache_read_tokens),
        cache_write_tokens=_sum(total.cache_write_tokens, more.cache_write_tokens),
        reasoning_tokens=_sum(total.reasoning_tokens, more.reasoning_tokens),
    )
