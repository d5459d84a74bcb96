"""Typed provider errors and their classification from HTTP statuses and provider error payloads.

Every message that reaches an error passes through a `Redactor` first, so the caller's API key
can never appear in an exception, its repr, a log line or a trace (providers sometimes echo keys
back in 401 bodies).
"""
from __future__ import annotations

import email.utils
import enum
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec


class ErrorKind(str, enum.Enum):
    AUTH = "auth"
    PERMISSION = "permission"
    MODEL_NOT_FOUND = "model_not_found"
    MISMATCH = "mismatch"  # the answer is not in the configured provider's format
    RATE_LIMIT = "rate_limit"
    OVERLOADED = "overloaded"
    CONTEXT_LENGTH = "context_length"
    REFUSAL = "refusal"
    IDLE_TIMEOUT = "idle_timeout"
    STREAM_CUT = "stream_cut"
    BAD_REQUEST = "bad_request"
    SERVER = "server"
    NETWORK = "network"


class ProviderError(Exception):
    """A failed provider call. `retryable` says whether the same request may succeed if sent again
    (adapters retry only before the first streamed event). The adapter that raised it fills in
    which model it was for (`context`), so `explain()` can say what happened in the user's terms."""

    kind: ErrorKind = ErrorKind.SERVER
    default_retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        retryable: bool | None = None,
        request_id: str | None = None,
        context: ErrorContext | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after = retry_after
        self.retryable = self.default_retryable if retryable is None else retryable
        self.request_id = request_id  # the provider's id for the failed request, for its support
        self.context = context

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(kind={self.kind.value!r}, status={self.status!r}, "
            f"retry_after={self.retry_after!r}, retryable={self.retryable!r}, message={self.message!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        kwargs = {
            "status": self.status,
            "retry_after": self.retry_after,
            "retryable": self.retryable,
            "request_id": self.request_id,
            "context": self.context,
        }
        return (_rebuild, (type(self), self.message, kwargs))

    def explain(self) -> str:
        """One line for the user: what the provider said, for which model, and what to check."""
        ctx = self.context
        if ctx is None:
            return self.message
        model = f"model {ctx.model_id}"
        http = f"HTTP {self.status}" if self.status is not None else "in the stream"
        detail = f": {self.message}"
        if self.kind is ErrorKind.AUTH:
            return f"the provider rejected the API key for {model} ({http}){detail}"
        if self.kind is ErrorKind.PERMISSION:
            return f"the provider refused {model} with this API key ({http}){detail}"
        if self.kind is ErrorKind.MODEL_NOT_FOUND:
            return f"the provider does not know the model {ctx.upstream_model!r} configured for {model} ({http}){detail}"
        if self.kind is ErrorKind.RATE_LIMIT:
            wait = f"; retry after {self.retry_after:.0f}s" if self.retry_after is not None else ""
            return f"the provider is rate-limiting {model} ({http}){wait}{detail}"
        if self.kind is ErrorKind.MISMATCH:
            return (
                f"the answer from {ctx.base_url} is not in the {ctx.provider_kind} format {model} is configured "
                f"for ({self.message}): check its `provider` kind and `base_url`"
            )
        return f"{model}{detail}"


class ErrorContext(msgspec.Struct, frozen=True):
    """Which configured model a provider error is about (no key, nothing secret)."""

    model_id: str
    upstream_model: str
    provider_kind: str
    base_url: str


def _rebuild(cls: type[ProviderError], message: str, kwargs: dict[str, Any]) -> ProviderError:
    return cls(message, **kwargs)


class AuthError(ProviderError):
    kind = ErrorKind.AUTH


class PermissionDeniedError(AuthError):
    kind = ErrorKind.PERMISSION


class MismatchError(ProviderError):
    """The base URL answered, but not in the configured provider's format (wrong `provider` kind or
    `base_url`): sending the same request again cannot help."""

    kind = ErrorKind.MISMATCH


class RateLimitError(ProviderError):
    kind = ErrorKind.RATE_LIMIT
    default_retryable = True


class OverloadedError(ProviderError):
    kind = ErrorKind.OVERLOADED
    default_retryable = True


class ContextLengthError(ProviderError):
    kind = ErrorKind.CONTEXT_LENGTH


class RefusalError(ProviderError):
    kind = ErrorKind.REFUSAL


class IdleTimeoutError(ProviderError):
    kind = ErrorKind.IDLE_TIMEOUT
    default_retryable = True


class StreamCutError(ProviderError):
    kind = ErrorKind.STREAM_CUT
    default_retryable = True


class BadRequestError(ProviderError):
    kind = ErrorKind.BAD_REQUEST


class ModelNotFoundError(BadRequestError):
    kind = ErrorKind.MODEL_NOT_FOUND


class ServerError(ProviderError):
    kind = ErrorKind.SERVER
    default_retryable = True


class NetworkError(ProviderError):
    kind = ErrorKind.NETWORK
    default_retryable = True


class Redactor:
    """Replaces a secret in text. Secrets shorter than 8 characters are not scrubbed (they would
    mangle ordinary words); such keys are only used with local test servers."""

    __slots__ = ("_secret",)
    MASK = "[REDACTED]"

    def __init__(self, secret: str) -> None:
        self._secret = secret if len(secret) >= 8 else ""

    def __call__(self, text: str) -> str:
        if self._secret and self._secret in text:
            return text.replace(self._secret, self.MASK)
        return text

    def __repr__(self) -> str:
        return "Redactor(***)"


NO_REDACTION = Redactor("")  # for translators used without a key (tests, benchmarks)


# ---- classification ------------------------------------------------------------------------------

# Phrases providers and OpenAI-compatible servers use for "the prompt does not fit".
_CONTEXT_PATTERN = re.compile(
    r"context[_ ]length|context window|maximum context|prompt is too long|too many tokens"
    r"|input is too long|exceeds? the (?:model'?s? )?(?:context|maximum)|input length and `?max_tokens`? exceed",
    re.IGNORECASE,
)

_TYPE_TO_CLASS: dict[str, type[ProviderError]] = {
    # Anthropic error.type values
    "authentication_error": AuthError,
    "permission_error": PermissionDeniedError,
    "rate_limit_error": RateLimitError,
    "overloaded_error": OverloadedError,
    "api_error": ServerError,
    "request_too_large": ContextLengthError,
    "invalid_request_error": BadRequestError,
    "not_found_error": ModelNotFoundError,
    # OpenAI error.code / error.type values
    "invalid_api_key": AuthError,
    "model_not_found": ModelNotFoundError,
    "rate_limit_exceeded": RateLimitError,
    "insufficient_quota": RateLimitError,
    "server_is_overloaded": OverloadedError,
    "slow_down": OverloadedError,
    "server_error": ServerError,
    "context_length_exceeded": ContextLengthError,
    "string_above_max_length": ContextLengthError,
}

# Codes that look like rate limits but will not clear by waiting.
_NOT_RETRYABLE_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})

_MAX_MESSAGE_CHARS = 2000


class ErrorInfo(msgspec.Struct, frozen=True):
    message: str = ""
    type: str | None = None
    code: str | None = None


def parse_error_body(body: bytes) -> ErrorInfo:
    """Best-effort reading of `{"error": {...}}` (OpenAI), `{"type": "error", "error": {...}}`
    (Anthropic) or plain text."""
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return ErrorInfo(message=body.decode("utf-8", "replace").strip())
    return error_info_from(data)


def error_info_from(data: Any) -> ErrorInfo:
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        code = err.get("code")
        return ErrorInfo(
            message=str(err.get("message") or err.get("detail") or ""),
            type=str(err["type"]) if err.get("type") is not None else None,
            code=str(code) if code is not None else None,
        )
    if isinstance(err, str):
        return ErrorInfo(message=err)
    return ErrorInfo(message=msgspec.json.encode(data).decode())


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait, from `retry-after-ms`, `retry-after` seconds or an HTTP date."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def classify(
    *,
    status: int | None,
    info: ErrorInfo,
    redact: Callable[[str], str],
    provider: str,
    retry_after: float | None = None,
) -> ProviderError:
    """One typed error from an HTTP status (None for in-stream errors) and the provider's payload."""
    message = redact(info.message)[:_MAX_MESSAGE_CHARS]
    label = info.code or info.type
    text = f"{provider}: {message}" if message else f"{provider}: HTTP {status}"
    if label and label not in message:
        text = f"{text} ({redact(label)})"

    cls: type[ProviderError] | None = None
    for key in (info.code, info.type):
        if key and key in _TYPE_TO_CLASS:
            cls = _TYPE_TO_CLASS[key]
            if cls is not BadRequestError:
                break
    if status == 404 or cls is ModelNotFoundError:
        # A 404 names either the model (the provider does not know it) or the path (the base URL
        # belongs to another kind of provider, or to none).
        named_model = info.code == "model_not_found" or "model" in info.message.lower()
        cls = ModelNotFoundError if named_model else MismatchError
    if status is not None:
        if status == 401:
            cls = AuthError
        elif status == 403:
            cls = PermissionDeniedError
        elif status == 429:
            cls = RateLimitError
        elif status in (503, 529) and cls is not ContextLengthError:
            cls = OverloadedError
        elif status == 413:
            cls = ContextLengthError
        elif cls is None:
            if status in (408, 409, 425) or status >= 500:
                cls = ServerError
            elif status >= 400:
                cls = BadRequestError
    if cls in (None, BadRequestError, ServerError) and _CONTEXT_PATTERN.search(info.message):
        cls = ContextLengthError
    cls = cls or ServerError
    retryable = False if (info.code in _NOT_RETRYABLE_CODES or info.type in _NOT_RETRYABLE_CODES) else None
    return cls(text, status=status, retry_after=retry_after, retryable=retryable)
