"""Cursor wire protocol, sans-IO: generated protobuf modules, Connect codec, errors, headers, ids.

Pure functions and small value types only: no sockets, no awaits, no clock reads. Framing is
delegated to `cursor_byok.hotpath` (compiled, or its pure twin).

    from cursor_byok.protocol import agent_pb2, aiserver_pb2, decode_bidi_append, ...
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

# Eager: what the health probe and the guard's refusals answer with, which needs no protobuf. The
# rest (protobuf and the generated modules, ~40 ms to import) on first use: the server listens,
# and answers the probe, before it has loaded them (gateway/front.py).
from .errors import (
    CONNECT_CODES,
    ERROR_DETAILS_TYPE,
    ConnectError,
    ErrorDetailsSpec,
    RawErrorDetail,
    connect_error_from,
    error_body,
    error_details_message,
    http_status_for,
    internal_error,
    model_not_found_error,
    new_error_id,
    provider_error,
)
from .paths import BIDI_APPEND_PATH, RUN_PATH, RUN_SSE_PATH

if TYPE_CHECKING:
    from .bidi import BidiAppend, client_message, decode_bidi_append, requested_model_id
    from .codec import (
        DEFAULT_MAX_MESSAGE_SIZE,
        SERVER_HEARTBEAT_FRAME,
        DecodedStream,
        StreamDecoder,
        decode_message,
        decode_stream,
        decode_unary,
        encode_server_message,
        encode_server_messages,
        encode_unary,
        end_stream_error,
        end_stream_ok,
        parse_end_stream,
    )
    from .compat import enum_name, unknown_fields, which
    from .grpc_web import FLAG_TRAILER, GRPC_STATUS, connect_end_to_trailer, parse_trailer, trailer_frame
    from .headers import RequestHeaders, parse_request_headers
    from .ids import (
        MAX_ID_BYTES,
        AgentSessionId,
        ConversationId,
        CursorRunId,
        ExecId,
        InjectionId,
        MessageId,
        RequestId,
        RunId,
        ToolCallId,
        TraceId,
        check_client_message_ids,
        check_id,
        new_trace_id,
    )
    from .messages import agent_pb2, aiserver_pb2, side_pb2

__getattr__ = lazy_names(
    __name__,
    {
        "bidi": ("BidiAppend", "client_message", "decode_bidi_append", "requested_model_id"),
        "codec": (
            "DEFAULT_MAX_MESSAGE_SIZE", "SERVER_HEARTBEAT_FRAME", "DecodedStream", "StreamDecoder", "decode_message",
            "decode_stream", "decode_unary", "encode_server_message", "encode_server_messages", "encode_unary",
            "end_stream_error", "end_stream_ok", "parse_end_stream",
        ),
        "compat": ("enum_name", "unknown_fields", "which"),
        "grpc_web": ("FLAG_TRAILER", "GRPC_STATUS", "connect_end_to_trailer", "parse_trailer", "trailer_frame"),
        "headers": ("RequestHeaders", "parse_request_headers"),
        "ids": (
            "MAX_ID_BYTES", "AgentSessionId", "ConversationId", "CursorRunId", "ExecId", "InjectionId", "MessageId",
            "RequestId", "RunId", "ToolCallId", "TraceId", "check_client_message_ids", "check_id", "new_trace_id",
        ),
        "messages": ("agent_pb2", "aiserver_pb2", "side_pb2"),
    },
)

__all__ = [
    "BIDI_APPEND_PATH",
    "CONNECT_CODES",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "MAX_ID_BYTES",
    "ERROR_DETAILS_TYPE",
    "FLAG_TRAILER",
    "GRPC_STATUS",
    "RUN_PATH",
    "RUN_SSE_PATH",
    "SERVER_HEARTBEAT_FRAME",
    "AgentSessionId",
    "BidiAppend",
    "ConnectError",
    "ConversationId",
    "CursorRunId",
    "DecodedStream",
    "ErrorDetailsSpec",
    "ExecId",
    "InjectionId",
    "MessageId",
    "RawErrorDetail",
    "RequestHeaders",
    "RequestId",
    "RunId",
    "StreamDecoder",
    "ToolCallId",
    "TraceId",
    "agent_pb2",
    "aiserver_pb2",
    "check_client_message_ids",
    "check_id",
    "client_message",
    "connect_end_to_trailer",
    "connect_error_from",
    "decode_bidi_append",
    "decode_message",
    "decode_stream",
    "decode_unary",
    "encode_server_message",
    "encode_server_messages",
    "encode_unary",
    "end_stream_error",
    "end_stream_ok",
    "enum_name",
    "error_body",
    "error_details_message",
    "http_status_for",
    "internal_error",
    "model_not_found_error",
    "new_error_id",
    "new_trace_id",
    "parse_end_stream",
    "parse_request_headers",
    "parse_trailer",
    "provider_error",
    "requested_model_id",
    "side_pb2",
    "trailer_frame",
    "unknown_fields",
    "which",
]
