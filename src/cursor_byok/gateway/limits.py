"""Bounds the HTTP server itself enforces, before any of our code runs: how long a request head
may take and how large it may be (hyper also caps a head at 100 header lines, answering 431), and
how many requests it serves at once. Request bodies and waits are bounded in our code (`Pending`),
and so are connections: granian has no first-byte deadline and no cap on them (`instance.connections`)."""
from __future__ import annotations

from typing import Any

from ..config import ServerConfig

# hyper refuses a read buffer below this.
_MIN_HTTP1_BUFFER = 8192
# Streams one HTTP/2 connection may open at once: the IDE keeps 16 appends in flight, plus RunSSEs.
MAX_STREAMS_PER_CONNECTION = 64


def granian_limits(server: ServerConfig) -> dict[str, Any]:
    from granian.http import HTTP1Settings, HTTP2Settings

    return {
        # Room above our own pending limit: junk waiting beyond it is evicted by us (the oldest
        # first) rather than holding granian's accept queue shut against a real request.
        "backpressure": server.max_pending_requests * 2 + 256,
        "http1_settings": HTTP1Settings(
            header_read_timeout=int(server.header_read_timeout_seconds * 1000),
            max_buffer_size=max(server.max_header_bytes, _MIN_HTTP1_BUFFER),
        ),
        "http2_settings": HTTP2Settings(
            max_headers_size=server.max_header_bytes,
            max_concurrent_streams=MAX_STREAMS_PER_CONNECTION,
        ),
    }
