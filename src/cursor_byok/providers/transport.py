"""The HTTP/SSE driver shared by all adapters: one POST, status → typed error, SSE events through a
sans-IO translator, time bounds, and retries that happen only before the first streamed event."""
from __future__ import annotations

import abc
import asyncio
import codecs
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import msgspec
from httpx_sse import ServerSentEvent
from httpx_sse._decoders import SSEDecoder, SSELineDecoder  # the public API only wraps them in generators

from ..config import ModelConfig
from ..http_client import HttpError, ProviderHttp, ProviderResponse
from .errors import (
    ErrorContext,
    IdleTimeoutError,
    MismatchError,
    NetworkError,
    ProviderError,
    Redactor,
    StreamCutError,
    classify,
    parse_error_body,
    parse_retry_after,
)
from .fragments import Fragments
from .pass_share import pass_share
from .types import ModelRequest, ProviderCall, StreamEvent, TextDelta, ThinkingDelta, ToolCallArgsDelta

_log = logging.getLogger("cursor_byok.providers")

_ERROR_BODY_CAP = 64 * 1024
# Where providers put their id for a request (OpenAI and compatibles; Anthropic).
_REQUEST_ID_HEADERS = ("x-request-id", "request-id")
_CONNECT_TIMEOUT = 30.0
_KEPT_BODY_CAP = 1024 * 1024  # detailed mode: the first MiB of a response body is kept
# A read is translated and handed on in parts of at most this many bytes (~80 small events), with
# a pass of the loop between two parts: a server behind a fast provider finds hundreds of events in
# one read, and in one step every other stream and every run start's next step would wait for all
# of them. A stream that keeps up reads far less at a time and never pauses. (4 KiB parts cut a
# start's latency no further under 8 streams at full speed and cost ~15 % more CPU per word.)
_READ_PART_BYTES = 8192

Sleep = Callable[[float], Awaitable[None]]

_Utf8Decoder = codecs.getincrementaldecoder("utf-8")


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Bounded retries of retryable errors that happen before the first streamed event."""

    max_retries: int = 2
    base_delay: float = 0.5  # doubled per attempt
    max_delay: float = 8.0
    max_retry_after: float = 60.0  # a longer retry-after is not waited out; the error propagates

    def delay(self, attempt: int, err: ProviderError) -> float | None:
        """Seconds to wait before retry number `attempt` (1-based), or None to give up."""
        if attempt > self.max_retries or not err.retryable:
            return None
        if err.retry_after is not None:
            return err.retry_after if err.retry_after <= self.max_retry_after else None
        return min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))


class StreamTranslator(Protocol):
    """Sans-IO mapping of one response's SSE events to neutral events. `feed` may raise a
    ProviderError for in-stream errors; `close` raises StreamCutError when the stream ended before
    its terminal event."""

    def feed(self, event: str, data: str) -> Sequence[StreamEvent]: ...

    def close(self) -> Sequence[StreamEvent]: ...


def merge_params(body: dict[str, Any], *extras: Mapping[str, Any]) -> dict[str, Any]:
    """Overlay extra parameters on a request body; a None value removes the key."""
    for extra in extras:
        for key, value in extra.items():
            if value is None:
                body.pop(key, None)
            else:
                body[key] = value
    return body


class HttpStreamProvider(abc.ABC):
    """Base of the three adapters. Subclasses provide the URL, headers, body and translator."""

    family: ClassVar[str] = ""

    def __init__(
        self,
        model: ModelConfig,
        api_key: str,
        client: ProviderHttp,
        *,
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.model = model
        self._client = client
        self._redact = Redactor(api_key)
        headers = {**self.auth_headers(api_key), **model.extra_headers}
        headers.setdefault("content-type", "application/json")
        headers.setdefault("accept", "text/event-stream")
        self._headers = client.headers(headers)  # they carry the key: never shown by repr
        self.url = self.endpoint(model.base_url)
        self._context = ErrorContext(model.id, model.model, self.family, model.base_url or self.url)
        self._fragments = Fragments()
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        # Reads are bounded per SSE event (first event vs. idle gap), sending by the open's bound.
        self._connect_timeout = min(_CONNECT_TIMEOUT, model.request_timeout_seconds)

    # ---- subclass hooks --------------------------------------------------------------------------
    @abc.abstractmethod
    def endpoint(self, base_url: str) -> str:
        """The full URL to POST to, from the configured base (or full) URL."""

    @abc.abstractmethod
    def auth_headers(self, api_key: str) -> dict[str, str]:
        """Headers that carry the key (kept private; never logged)."""

    @abc.abstractmethod
    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The provider's JSON request body, built in a fixed key order. Parts that repeat from one
        request to the next come from `self._fragments` as ready JSON."""

    @abc.abstractmethod
    def new_translator(self) -> StreamTranslator:
        """A fresh translator for one response stream."""

    # ---- public ----------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model.model!r}, url={self.url!r})"

    def encode_request(self, request: ModelRequest) -> bytes:
        body = merge_params(self.build_body(request), self.model.extra_params, request.extra_params)
        return self._fragments.encode(body)

    async def stream(
        self, request: ModelRequest, call: ProviderCall | None = None, ready: Awaitable[object] | None = None
    ) -> AsyncIterator[StreamEvent]:
        """The response's events. `call`, when given, is filled in with what the exchange did.
        `ready`: what the request must not be sent before (the caller builds it meanwhile)."""
        # One generator for attempts and events: every event crosses a single async-generator hop.
        body = self.encode_request(request)
        kept: bytearray | None = None
        if call is not None:
            call.provider_kind = self.family
            call.upstream_model = request.model
            if call.keep_bodies:
                call.request_body = self._redact(body.decode("utf-8", "replace")).encode()
        if ready is not None:
            # Shielded: `ready` is shared (the turn's input commit is every write's in that
            # commit): cancelling this call must not cancel it for the others.
            await asyncio.shield(ready)
            if call is not None:  # the call starts when its request may leave: our own wait is not the provider's time
                call.started_ns = time.monotonic_ns()
        attempt = 0
        while True:
            emitted = False
            # One timer bounds the wait for the response and its first event, then each idle gap.
            watch = _IdleWatch(self.model.request_timeout_seconds, self.model.idle_timeout_seconds)
            try:
                if call is not None:
                    call.attempts += 1
                try:
                    response = await self._open(body, watch)
                except BaseException:
                    watch.close()
                    raise
                if call is not None:
                    call.response_ns = time.monotonic_ns()
                    call.status = response.status
                    call.provider_request_id = _request_id(response, self._redact)
                    if call.keep_bodies:
                        kept = call.response_body = bytearray()
                try:
                    translator = self.new_translator()
                    reader = _SSEReader()
                    share = pass_share()
                    try:
                        while True:
                            watch.waiting = True
                            try:
                                chunk = await response.next_chunk()
                            except asyncio.CancelledError:
                                if watch.timed_out():
                                    raise IdleTimeoutError(
                                        f"{self.family}: stream stalled (no event for {watch.window:g}s)"
                                    ) from None
                                raise
                            except HttpError as exc:
                                raise StreamCutError(f"{self.family}: stream broke: {self._describe(exc)}") from None
                            if not chunk:
                                break
                            watch.waiting = False
                            if kept is not None and len(kept) < _KEPT_BODY_CAP:
                                kept += chunk[: _KEPT_BODY_CAP - len(kept)]
                            size, start = len(chunk), 0
                            while True:  # a read in parts of _READ_PART_BYTES (nearly always one)
                                part = chunk if size <= _READ_PART_BYTES else chunk[start : start + _READ_PART_BYTES]
                                # A response's first events go at once (a run start's first text);
                                # later parts wait their turn when other streams used up this pass.
                                turn = share.turn(len(part), ahead=not emitted)
                                if turn is not None:
                                    await turn
                                elif start:  # far behind the provider: what else is ready runs first
                                    await asyncio.sleep(0)
                                events, failed = _translated(reader.feed(part), translator, watch)
                                for event in events:
                                    emitted = True
                                    yield event
                                if failed is not None:
                                    raise failed
                                start += _READ_PART_BYTES
                                if start >= size:
                                    break
                        for sse in reader.close():
                            for event in translator.feed(sse.event, sse.data):
                                emitted = True
                                yield event
                    except msgspec.DecodeError as exc:  # includes ValidationError: JSON of another shape
                        raise MismatchError(f"{self.family}: unexpected event ({self._redact(str(exc))})") from None
                    finally:
                        watch.close()
                    try:
                        closing = translator.close()
                    except StreamCutError:
                        if emitted or not reader.seen:
                            raise
                        # Events came, and none of them meant anything to this adapter.
                        raise MismatchError(f"{self.family}: no event of the expected format") from None
                    for event in closing:
                        emitted = True
                        yield event
                finally:
                    watch.close()  # as it is when the reading ended; here too when it never began
                    await response.aclose()
                    if kept is not None:
                        call.response_body = bytearray(self._redact(kept.decode("utf-8", "replace")).encode())  # type: ignore[union-attr]
                return
            except ProviderError as err:
                attempt += 1
                delay = None if emitted else self._retry.delay(attempt, err)
                if delay is None:
                    self._report(err)
                    raise
                # The message names the provider family already (`openai-chat: ...`).
                _log.warning(
                    "%s; retry %d/%d in %.2fs", err.message, attempt, self._retry.max_retries, delay,
                    extra={"model": self.model.id, "retry": attempt},
                )
                await self._sleep(delay)

    def _report(self, err: ProviderError) -> None:
        """Give up on `err`: name the model it is about and log it once, with the provider's status
        and request id (the message is already redacted; the key is never logged)."""
        if err.context is None:
            err.context = self._context
        _log.warning(
            "provider request failed: %s",
            err.message,
            extra={
                "model": self.model.id,
                "provider_kind": self.family,
                "error_kind": err.kind.value,
                "status": err.status,
                "provider_request_id": err.request_id,
            },
        )

    async def _open(self, body: bytes, watch: _IdleWatch) -> ProviderResponse:
        """Send the request; return a successful event-stream response or raise a typed error. The
        response must come within `watch`'s first window (its first event, within what is left)."""
        watch.waiting = True
        try:
            response = await self._client.post(self.url, body, self._headers, connect_timeout=self._connect_timeout)
        except asyncio.CancelledError:
            if watch.timed_out():
                raise IdleTimeoutError(f"{self.family}: no response within {watch.window:g}s") from None
            raise
        except HttpError as exc:
            raise NetworkError(f"{self.family}: request failed: {self._describe(exc)}") from None
        finally:
            watch.waiting = False
        try:
            if response.status >= 400:
                raise await self._status_error(response)
            content_type = response.headers.get("content-type", "")
            if "text/event-stream" not in content_type:
                raise await self._unexpected_body(response, content_type)
        except BaseException:
            await response.aclose()
            raise
        return response

    async def _read_capped(self, response: ProviderResponse) -> bytes:
        """Whatever of the body arrives within the idle bound, up to the cap."""
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.model.idle_timeout_seconds):
                while size < _ERROR_BODY_CAP and (chunk := await response.next_chunk()):
                    chunks.append(chunk)
                    size += len(chunk)
        except (TimeoutError, HttpError):
            pass  # classify by status with whatever arrived
        return b"".join(chunks)[:_ERROR_BODY_CAP]

    async def _status_error(self, response: ProviderResponse) -> ProviderError:
        body = await self._read_capped(response)
        err = classify(
            status=response.status,
            info=parse_error_body(body),
            redact=self._redact,
            provider=self.family,
            retry_after=parse_retry_after(response.headers),
        )
        err.request_id = _request_id(response, self._redact)
        return err

    async def _unexpected_body(self, response: ProviderResponse, content_type: str) -> ProviderError:
        body = await self._read_capped(response)
        info = parse_error_body(body)
        if "json" in content_type and (info.type or info.code):
            err = classify(status=None, info=info, redact=self._redact, provider=self.family)
        else:
            err = MismatchError(
                f"{self.family}: expected an event stream, got {self._redact(content_type)[:200] or 'no content type'!r}",
                status=response.status,
            )
        err.request_id = _request_id(response, self._redact)
        return err

    def _describe(self, exc: BaseException) -> str:
        # HttpError chains the client's error, which names what happened.
        cause = exc.__cause__ or exc
        text = str(cause)
        return self._redact(f"{type(cause).__name__}: {text}" if text else type(cause).__name__)


def _request_id(response: ProviderResponse, redact: Callable[[str], str]) -> str | None:
    """The provider's id of the request, as stored and shown: a provider may echo anything here,
    the key among it."""
    for name in _REQUEST_ID_HEADERS:
        if value := response.headers.get(name):
            return redact(value)[:200]
    return None


def _translated(events: list[ServerSentEvent], translator: StreamTranslator, watch: _IdleWatch) -> tuple[Sequence[StreamEvent], Exception | None]:
    """The events of one read (or of one part of a long read), translated, with adjacent deltas
    of one message part (text, thinking, one tool call's arguments) joined into one: a provider
    faster than the server leaves many in each read, and every delta costs a frame, an encode and a
    send on its way to the IDE, on the loop every other stream and run start shares. The error a
    translation raised comes back beside what came before it, which is streamed first (a call that
    has streamed something is not retried)."""
    if not events:
        return (), None
    watch.progress()  # once for the read's events: they all arrived now
    failed: Exception | None = None
    if len(events) == 1:  # a stream that keeps up: one event a read, as the adapter gives it
        sse = events[0]
        try:
            produced: Sequence[StreamEvent] = translator.feed(sse.event, sse.data)
        except Exception as exc:  # noqa: BLE001 - raised by the caller
            return (), exc
    else:
        produced = []
        try:
            for sse in events:
                produced += translator.feed(sse.event, sse.data)
        except Exception as exc:  # noqa: BLE001 - raised by the caller once what came before it is streamed
            failed = exc
    return (produced if len(produced) < 2 else _adjacent_joined(produced)), failed


def _adjacent_joined(events: Sequence[StreamEvent]) -> list[StreamEvent]:
    out: list[StreamEvent] = []
    pieces: list[str] = []  # of the delta at out[-1], while it is being joined
    for event in events:
        if out and _joinable(out[-1], event):
            if not pieces:
                pieces.append(_piece(out[-1]))
            pieces.append(_piece(event))
            continue
        if pieces:
            out[-1], pieces = _joined(out[-1], pieces), []
        out.append(event)
    if pieces:
        out[-1] = _joined(out[-1], pieces)
    return out


def _joinable(previous: StreamEvent, event: StreamEvent) -> bool:
    kind = type(event)
    if kind is TextDelta or kind is ThinkingDelta:
        return type(previous) is kind
    return (
        kind is ToolCallArgsDelta and type(previous) is kind
        and event.index == previous.index and event.id == previous.id  # type: ignore[union-attr]
    )


def _piece(delta: StreamEvent) -> str:
    return delta.delta if type(delta) is ToolCallArgsDelta else delta.text  # type: ignore[union-attr]


def _joined(first: StreamEvent, pieces: list[str]) -> StreamEvent:
    if type(first) is ToolCallArgsDelta:
        return ToolCallArgsDelta(first.index, first.id, "".join(pieces))
    return type(first)("".join(pieces))  # type: ignore[call-arg]


class _SSEReader:
    """Body bytes → server-sent events, with httpx-sse's decoders fed directly: its EventSource
    wraps them in two async-generator layers over httpx's text layer, ~6 µs per chunk that a busy
    server pays tens of thousands of times a second. A read is decoded in one call while every read
    so far held whole characters; after the first that did not (a character split between reads,
    or a bad byte), by the incremental decoder."""

    __slots__ = ("_whole", "_text", "_lines", "_events", "seen")

    def __init__(self) -> None:
        self._whole = True  # the incremental decoder has not been used, so it holds nothing
        self._text = _Utf8Decoder("replace")  # SSE is UTF-8 by definition; a bad byte becomes U+FFFD
        self._lines = SSELineDecoder()
        self._events = SSEDecoder()
        self.seen = False  # any event at all arrived

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        if self._whole:
            try:
                text = chunk.decode()
            except UnicodeDecodeError:
                self._whole = False
                text = self._text.decode(chunk)
        else:
            text = self._text.decode(chunk)
        return self._dispatch(self._lines.decode(text))

    def close(self) -> list[ServerSentEvent]:
        """Whatever the end of the body completes (an unterminated last event is dropped, per SSE)."""
        return self._dispatch(self._lines.decode(self._text.decode(b"", True)) + self._lines.flush())

    def _dispatch(self, lines: list[str]) -> list[ServerSentEvent]:
        decode = self._events.decode
        events = []
        for line in lines:
            if (sse := decode(line)) is not None:
                events.append(sse)
        if events:
            self.seen = True
        return events


class _IdleWatch:
    """Bounds each wait for the next SSE event with one timer per stream (an `asyncio.timeout` per
    event would cost more than decoding the event). The first wait may last `first_wait` seconds,
    later ones `idle`. It cancels the consuming task only while that task waits inside the stream,
    and `timed_out()` turns that cancellation back into a timeout."""

    __slots__ = ("_loop", "_task", "_base", "_handle", "_armed_at", "_idle", "deadline", "window", "waiting",
                 "_fired")

    def __init__(self, first_wait: float, idle: float) -> None:
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None, "provider streams are consumed inside a task"
        self._task: asyncio.Task[Any] | None = task  # until closed
        self._base = task.cancelling()
        self._idle = idle
        self.window = first_wait
        self.deadline = self._loop.time() + first_wait
        self.waiting = False
        self._fired = False
        self._arm(self.deadline)

    def _arm(self, when: float) -> None:
        self._armed_at = when
        self._handle = self._loop.call_at(when, self._check)

    def progress(self) -> None:
        self.waiting = False
        self.window = self._idle
        self.deadline = self._loop.time() + self._idle
        if self.deadline < self._armed_at:  # only when the idle bound is shorter than the first wait
            self._handle.cancel()
            self._arm(self.deadline)

    def _check(self) -> None:
        now = self._loop.time()
        if now < self.deadline:
            self._arm(self.deadline)  # events arrived meanwhile: sleep until the moved deadline
        elif not self.waiting:
            # The consumer, not the provider, is holding things up; give the next wait a full window.
            self.deadline = now + self._idle
            self._arm(self.deadline)
        else:
            self._fired = True
            if self._task is not None:
                self._task.cancel()

    def timed_out(self) -> bool:
        """After a CancelledError: True if it was ours alone (no outside cancellation pending)."""
        if not self._fired:
            return False
        self._fired = False
        return self._task is not None and self._task.uncancel() <= self._base

    def close(self) -> None:
        self._handle.cancel()
        self._task = None  # a cancelled task's exception holds the frame that holds this watch
