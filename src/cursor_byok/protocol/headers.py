"""Request headers the Connect layer and the agent routes care about (PROTOCOL.md 1.2)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from .errors import ConnectError
from .ids import check_id

__all__ = ["RequestHeaders", "parse_request_headers"]

_WANTED = frozenset(
    {
        "connect-protocol-version",
        "connect-timeout-ms",
        "content-encoding",
        "connect-content-encoding",
        "grpc-encoding",
        "grpc-timeout",
        "x-request-id",
        "x-parent-request-id",
        "x-parent-agent-tool-call-id",
        "x-cursor-streaming",
        "content-length",
    }
)
_WANTED_BYTES = {name.encode(): name for name in _WANTED}
# What a plain request (the IDE's: no encoding, no deadline, no parent) lacks: absent all of these,
# nothing of them is parsed.
_UNCOMMON = _WANTED - {"connect-protocol-version", "x-request-id", "content-length"}
_ENCODINGS = frozenset({"identity", "gzip"})
# Connect spec: connect-timeout-ms is a positive integer of at most 10 digits.
_MAX_TIMEOUT_DIGITS = 10


class RequestHeaders(msgspec.Struct, frozen=True):
    """Parsed request headers; absent headers are None (streaming: False).

    `content_encoding` is "gzip" when `content-encoding` (whole unary body),
    `connect-content-encoding` (stream envelopes) or gRPC-Web's `grpc-encoding` says so, else
    "identity". `timeout_ms`: the client's deadline, `connect-timeout-ms` or gRPC's `grpc-timeout`.
    `parent_request_id` / `parent_tool_call_id` mark a subagent child's appends (2.1.1): both
    or neither.
    """

    connect_protocol_version: str | None = None
    timeout_ms: int | None = None
    content_encoding: str = "identity"
    request_id: str | None = None
    parent_request_id: str | None = None
    parent_tool_call_id: str | None = None
    streaming: bool = False
    content_length: int | None = None  # absent, or not plain digits (the HTTP server checks it)


HeaderSource = Mapping[str, str] | Iterable[tuple[bytes, bytes]]


def _collect(headers: HeaderSource) -> dict[str, str]:
    """Lower-cased name → first value, for the headers we read."""
    found: dict[str, str] = {}
    # ASGI pairs come as a list (granian's, and the guard's copy): told apart without the ABC's
    # isinstance, which costs more than the rest of a plain request's pass.
    if type(headers) is not list and isinstance(headers, Mapping):
        for name, value in headers.items():
            name = name.lower()
            if name in _WANTED and name not in found:
                found[name] = value.strip()
        return found
    # ASGI pairs: the HTTP server hands names over lower-cased, so most are looked up as they are
    # (one membership test for a header we do not read; lower-cased only when it has capitals).
    for raw_name, raw_value in headers:
        if raw_name in _WANTED_BYTES:
            name = _WANTED_BYTES[raw_name]
        elif raw_name.islower() or (name := _WANTED_BYTES.get(raw_name.lower())) is None:
            continue
        if name not in found:
            found[name] = raw_value.decode("latin-1").strip()
    return found


def _encoding(name: str, value: str | None) -> bool:
    """True for gzip, False for identity/absent; anything else is unimplemented."""
    if value is None or value == "":
        return False
    lowered = value.lower()
    if lowered not in _ENCODINGS:
        raise ConnectError("unimplemented", f"unsupported {name} {value!r} (supported: gzip, identity)")
    return lowered == "gzip"


def _timeout(value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isascii() or not value.isdigit() or len(value) > _MAX_TIMEOUT_DIGITS:
        raise ConnectError("invalid_argument", f"invalid connect-timeout-ms {value!r}")
    return int(value)


# gRPC's timeout: at most 8 digits and a unit (hours to nanoseconds), in milliseconds here.
_GRPC_TIMEOUT_UNIT_MS = {"H": 3_600_000.0, "M": 60_000.0, "S": 1000.0, "m": 1.0, "u": 0.001, "n": 0.000001}
_MAX_GRPC_TIMEOUT_DIGITS = 8


def _grpc_timeout(value: str) -> int:
    digits, unit = value[:-1], value[-1:]
    if unit not in _GRPC_TIMEOUT_UNIT_MS or not (digits.isascii() and digits.isdigit()) or len(digits) > _MAX_GRPC_TIMEOUT_DIGITS:
        raise ConnectError("invalid_argument", f"invalid grpc-timeout {value!r}")
    return max(1, int(int(digits) * _GRPC_TIMEOUT_UNIT_MS[unit])) if int(digits) else 0


def parse_request_headers(headers: HeaderSource) -> RequestHeaders:
    """Read a request's headers (a str mapping, or ASGI-style (bytes, bytes) pairs).

    Raises ConnectError: invalid_argument for a malformed timeout or a lone parent header,
    unimplemented for a content encoding other than identity/gzip.
    """
    found = _collect(headers)
    length = found.get("content-length")
    content_length = int(length) if length is not None and length.isascii() and length.isdigit() else None
    if found.keys().isdisjoint(_UNCOMMON):
        return RequestHeaders(
            connect_protocol_version=found.get("connect-protocol-version"),
            request_id=found.get("x-request-id") or None,
            content_length=content_length,
        )
    gzip = _encoding("content-encoding", found.get("content-encoding"))
    gzip = _encoding("connect-content-encoding", found.get("connect-content-encoding")) or gzip
    gzip = _encoding("grpc-encoding", found.get("grpc-encoding")) or gzip
    parent_request_id = found.get("x-parent-request-id") or None
    parent_tool_call_id = found.get("x-parent-agent-tool-call-id") or None
    if (parent_request_id is None) != (parent_tool_call_id is None):
        raise ConnectError(
            "invalid_argument",
            "protocol error: x-parent-request-id and x-parent-agent-tool-call-id must be sent together",
        )
    if parent_request_id is not None:  # and so the tool call's id (checked above)
        check_id("x-parent-request-id", parent_request_id)
        check_id("x-parent-agent-tool-call-id", parent_tool_call_id)
    return RequestHeaders(
        connect_protocol_version=found.get("connect-protocol-version"),
        timeout_ms=_timeout(found.get("connect-timeout-ms")) if "grpc-timeout" not in found else _grpc_timeout(found["grpc-timeout"]),
        content_encoding="gzip" if gzip else "identity",
        request_id=found.get("x-request-id") or None,
        parent_request_id=parent_request_id,
        parent_tool_call_id=parent_tool_call_id,
        streaming=found.get("x-cursor-streaming", "").lower() == "true",
        content_length=content_length,
    )
