"""Streaming model providers on the user's own keys: OpenAI Chat Completions (and compatible
servers), OpenAI Responses and Anthropic Messages, behind one provider-neutral interface.

Nothing here knows about Cursor: requests and events are the neutral types below.
"""
from __future__ import annotations

from .errors import (
    AuthError,
    BadRequestError,
    ContextLengthError,
    ErrorKind,
    IdleTimeoutError,
    NetworkError,
    OverloadedError,
    ProviderError,
    RateLimitError,
    RefusalError,
    ServerError,
    StreamCutError,
)
from .factory import FailoverProvider, Provider, make_provider
from .pool import ProviderPool
from .transport import RetryPolicy
from .types import (
    Finish,
    ImagePart,
    Message,
    ModelRequest,
    Part,
    Role,
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
    add_usage,
)

__all__ = [
    "AuthError",
    "BadRequestError",
    "ContextLengthError",
    "ErrorKind",
    "FailoverProvider",
    "Finish",
    "IdleTimeoutError",
    "ImagePart",
    "Message",
    "ModelRequest",
    "NetworkError",
    "OverloadedError",
    "Part",
    "Provider",
    "ProviderError",
    "ProviderPool",
    "RateLimitError",
    "RefusalError",
    "RetryPolicy",
    "Role",
    "ServerError",
    "StopReason",
    "StreamCutError",
    "StreamEvent",
    "TextDelta",
    "TextPart",
    "ThinkingDelta",
    "ThinkingEnd",
    "ThinkingPart",
    "ToolCallArgsDelta",
    "ToolCallEnd",
    "ToolCallPart",
    "ToolCallStart",
    "ToolResultPart",
    "ToolSchema",
    "Usage",
    "add_usage",
    "make_provider",
]
