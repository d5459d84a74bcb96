"""The agent RPCs' HTTP paths (PROTOCOL.md 1.1): what the gateway routes by and capture records."""
from __future__ import annotations

__all__ = ["BIDI_APPEND_PATH", "RUN_PATH", "RUN_SSE_PATH"]

RUN_SSE_PATH = "/agent.v1.AgentService/RunSSE"
RUN_PATH = "/agent.v1.AgentService/Run"  # the same agent stream as one HTTP/2 bidi call
BIDI_APPEND_PATH = "/aiserver.v1.BidiService/BidiAppend"
