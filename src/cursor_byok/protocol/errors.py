"""Connect errors: the exception, Cursor's `aiserver.v1.ErrorDetails`, and their JSON wire forms.

A Connect error travels either as the JSON payload of an end-of-stream frame
(`{"error": {...}}`, streaming responses) or as a bare JSON body with a non-200 status (unary
calls). Both carry `code`, an optional `message` and optional `details`; Cursor puts one
`aiserver.v1.ErrorDetails` protobuf (base64) in `details` to drive the IDE's error UI.
"""
from __future__ import annotations

import base64
import binascii
import json
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from cursor_byok.hotpath import HotPathError

if TYPE_CHECKING:
    from .pb import aiserver_v1_pb2

# The protobuf modules are imported where a function needs them, not here: the health probe and the
# guard's refusals answer with these errors before the server has loaded protobuf (gateway/front.py).

__all__ = [
    "CONNECT_CODES",
    "ERROR_DETAILS_TYPE",
    "ConnectError",
    "ErrorDetailsSpec",
    "RawErrorDetail",
    "connect_error_from",
    "error_body",
    "error_details_message",
    "http_status_for",
    "internal_error",
    "model_not_found_error",
    "new_error_id",
    "provider_error",
]

ERROR_DETAILS_TYPE = "aiserver.v1.ErrorDetails"

# Connect code → HTTP status, from the Connect protocol specification's error-code table.
_HTTP_STATUS: dict[str, int] = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}
CONNECT_CODES = frozenset(_HTTP_STATUS)

class ErrorDetailsSpec(msgspec.Struct, frozen=True):
    """The fields of an `aiserver.v1.ErrorDetails` that we set; None leaves an optional unset.

    `error` is an `aiserver.v1.ErrorDetails.Error` value (e.g. ERROR_PROVIDER_ERROR = 57).
    """

    error: int
    title: str = ""
    detail: str = ""
    is_retryable: bool | None = None
    show_request_id: bool | None = None
    is_expected: bool | None = None
    allow_command_links: bool | None = None
    should_show_immediate_error: bool | None = None

    def to_proto(self) -> aiserver_v1_pb2.ErrorDetails:
        return error_details_message(self)

    def to_bytes(self) -> bytes:
        return error_details_message(self).SerializeToString()

    @classmethod
    def from_proto(cls, msg: aiserver_v1_pb2.ErrorDetails) -> ErrorDetailsSpec:
        d = msg.details

        def opt(holder: Any, name: str) -> bool | None:
            return getattr(holder, name) if holder.HasField(name) else None

        return cls(
            error=msg.error,
            title=d.title,
            detail=d.detail,
            is_retryable=opt(d, "is_retryable"),
            show_request_id=opt(d, "show_request_id"),
            is_expected=opt(msg, "is_expected"),
            allow_command_links=opt(
                d, "allow_command_links_potentially_unsafe_please_only_use_for_handwritten_trusted_markdown"
            ),
            should_show_immediate_error=opt(d, "should_show_immediate_error"),
        )


class RawErrorDetail(msgspec.Struct, frozen=True):
    """A detail we do not interpret (another type, or bytes that did not parse): kept verbatim."""

    type: str
    value: bytes


ErrorDetail = ErrorDetailsSpec | RawErrorDetail | bytes


class ConnectError(Exception):
    """A Connect RPC error: `code` is the Connect code string, `details` go out as
    `aiserver.v1.ErrorDetails` (ErrorDetailsSpec, or already-serialized bytes) unless a
    RawErrorDetail names another type."""

    def __init__(self, code: str, message: str = "", details: Sequence[ErrorDetail] = ()) -> None:
        if code not in CONNECT_CODES:
            raise ValueError(f"not a Connect error code: {code!r}")
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.details: list[ErrorDetail] = list(details)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.message else self.code

    def __repr__(self) -> str:
        return f"ConnectError({self.code!r}, {self.message!r}, details={self.details!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConnectError):
            return NotImplemented
        return (self.code, self.message, self.details) == (other.code, other.message, other.details)

    def __hash__(self) -> int:
        # Exceptions must stay hashable (traceback and task machinery keep them in sets).
        return hash((self.code, self.message))

    @property
    def http_status(self) -> int:
        return http_status_for(self.code)

    def to_json_obj(self) -> dict[str, Any]:
        """The Connect error object: code, then message and details only when non-empty."""
        obj: dict[str, Any] = {"code": self.code}
        if self.message:
            obj["message"] = self.message
        if self.details:
            obj["details"] = [_detail_json(d) for d in self.details]
        return obj

    @classmethod
    def from_json_obj(cls, obj: object) -> ConnectError:
        """Parse a Connect error object; an unrecognized or missing code reads as `unknown`."""
        if not isinstance(obj, dict):
            raise ConnectError("internal", "Connect error is not a JSON object")
        code = obj.get("code")
        if not isinstance(code, str) or code not in CONNECT_CODES:
            code = "unknown"
        message = obj.get("message")
        if not isinstance(message, str):
            message = ""
        raw_details = obj.get("details")
        details: list[ErrorDetail] = []
        if isinstance(raw_details, list):
            details = [_parse_detail(d) for d in raw_details]
        return cls(code, message, details)


def error_details_message(spec: ErrorDetailsSpec) -> aiserver_v1_pb2.ErrorDetails:
    """Build the `aiserver.v1.ErrorDetails` protobuf for a spec."""
    from .pb.aiserver_v1_pb2 import ErrorDetails

    msg = ErrorDetails(error=spec.error)
    d = msg.details
    d.title = spec.title
    d.detail = spec.detail
    if spec.allow_command_links is not None:
        d.allow_command_links_potentially_unsafe_please_only_use_for_handwritten_trusted_markdown = (
            spec.allow_command_links
        )
    if spec.is_retryable is not None:
        d.is_retryable = spec.is_retryable
    if spec.show_request_id is not None:
        d.show_request_id = spec.show_request_id
    if spec.should_show_immediate_error is not None:
        d.should_show_immediate_error = spec.should_show_immediate_error
    if spec.is_expected is not None:
        msg.is_expected = spec.is_expected
    return msg


def _b64(data: bytes) -> str:
    # Connect accepts padded or unpadded base64; Cursor's own errors use it without padding.
    return base64.b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    text = text.strip()
    alt = b"-_" if ("-" in text or "_" in text) else None
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=alt, validate=True)


def _detail_json(detail: ErrorDetail) -> dict[str, str]:
    if isinstance(detail, ErrorDetailsSpec):
        return {"type": ERROR_DETAILS_TYPE, "value": _b64(detail.to_bytes())}
    if isinstance(detail, RawErrorDetail):
        return {"type": detail.type, "value": _b64(detail.value)}
    return {"type": ERROR_DETAILS_TYPE, "value": _b64(bytes(detail))}


def _parse_detail(obj: object) -> ErrorDetail:
    if not isinstance(obj, dict):
        return RawErrorDetail("", b"")
    type_name = obj.get("type") if isinstance(obj.get("type"), str) else ""
    value_text = obj.get("value") if isinstance(obj.get("value"), str) else ""
    try:
        value = _unb64(value_text)
    except (binascii.Error, ValueError):
        return RawErrorDetail(type_name, value_text.encode("utf-8", "replace"))
    if type_name == ERROR_DETAILS_TYPE:
        from google.protobuf.message import DecodeError

        from .pb.aiserver_v1_pb2 import ErrorDetails

        try:
            return ErrorDetailsSpec.from_proto(ErrorDetails.FromString(value))
        except DecodeError:
            pass
    return RawErrorDetail(type_name, value)


def http_status_for(code: str) -> int:
    """HTTP status for a Connect code (Connect spec table); unknown codes map to 500."""
    return _HTTP_STATUS.get(code, 500)


def error_body(err: ConnectError) -> bytes:
    """JSON body of a unary / non-stream error response (content-type application/json)."""
    return json.dumps(err.to_json_obj(), separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def connect_error_from(exc: BaseException) -> ConnectError:
    """Map any exception to the ConnectError the client should see.

    ConnectError passes through; hot-path errors carry their own code; a protobuf decode
    failure is invalid_argument; anything else is an opaque `internal` (see `internal_error`: a
    caller that can log should mint the id itself and log the exception with it).
    """
    if isinstance(exc, ConnectError):
        return exc
    code = getattr(exc, "code", None)
    if isinstance(exc, HotPathError) and isinstance(code, str) and code in CONNECT_CODES and code != "internal":
        return ConnectError(code, str(exc))
    from google.protobuf.message import DecodeError

    if isinstance(exc, DecodeError):
        return ConnectError("invalid_argument", f"protobuf decode error: {exc}")
    return internal_error(new_error_id())


def new_error_id() -> str:
    """An opaque id for one unexpected failure: the client gets it, the log line carries it too."""
    return secrets.token_hex(6)


def internal_error(error_id: str) -> ConnectError:
    """What a client sees of an unexpected failure: the error id, never the exception's text (paths,
    keys, other users' data); the text stays in the server log under the same id."""
    return ConnectError("internal", f"internal error {error_id} (the server log has the details)")


def provider_error(message: str, *, retryable: bool = True, error: int | None = None) -> ConnectError:
    """A model-provider / upstream HTTP failure as Cursor shows it (PROTOCOL.md 2.7):
    `unavailable` with one detail titled "Provider Error", ERROR_PROVIDER_ERROR unless `error`
    names a more specific `ErrorDetails.Error`."""
    from .pb.aiserver_v1_pb2 import ErrorDetails

    spec = ErrorDetailsSpec(
        error=ErrorDetails.Error.ERROR_PROVIDER_ERROR if error is None else error,
        title="Provider Error",
        detail=message,
        is_retryable=retryable,
        show_request_id=True,
        allow_command_links=True,
        should_show_immediate_error=False,
        is_expected=True,
    )
    return ConnectError("unavailable", message, [spec])


def model_not_found_error(model_id: str) -> ConnectError:
    """What api2.cursor.sh answers for an unknown model (fixtures/model_not_found_*)."""
    from .pb.aiserver_v1_pb2 import ErrorDetails

    spec = ErrorDetailsSpec(
        error=ErrorDetails.Error.ERROR_BAD_MODEL_NAME,
        title="AI Model Not Found",
        detail=f"Unknown model ID: {model_id}",
        is_retryable=False,
        show_request_id=False,
        is_expected=True,
    )
    return ConnectError("not_found", "Error", [spec])
