"""A provider's failure as the Connect error the IDE shows.

Providers know nothing of Cursor: they raise a ProviderError with a provider-side kind. This is
where that kind becomes a Connect code, so the IDE tells a bad key from a rate limit from a
network problem. A provider's answer is never `internal`.
"""
from __future__ import annotations

from ..protocol import ConnectError, provider_error
from ..run import ErrorKind, ProviderError

# Kinds not listed are transient or on the provider's side: `unavailable`, as Cursor's own
# backend reports provider errors (PROTOCOL.md 2.7).
_CONNECT_CODES: dict[ErrorKind, str] = {
    ErrorKind.AUTH: "unauthenticated",
    ErrorKind.PERMISSION: "permission_denied",
    ErrorKind.MODEL_NOT_FOUND: "not_found",
    ErrorKind.RATE_LIMIT: "resource_exhausted",
    ErrorKind.MISMATCH: "failed_precondition",
}


def connect_error_for(err: ProviderError) -> ConnectError:
    """The Connect error for a provider failure, with the one-line explanation as its message and
    Cursor's "Provider Error" details (so the IDE shows the text, not a generic failure)."""
    shown = provider_error(err.explain(), retryable=err.retryable)
    return ConnectError(_CONNECT_CODES.get(err.kind, "unavailable"), shown.message, shown.details)


__all__ = ["connect_error_for"]
