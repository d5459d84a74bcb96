"""Why a run failed, as the Connect error the IDE shows.

Providers know nothing of Cursor: they raise a ProviderError with a provider-side kind. This is
where that kind becomes a Connect code, so the IDE tells a bad key from a rate limit from a
network problem. A provider's answer is never `internal`; neither is a storage fault (`unavailable`,
naming it).
"""
from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

from ..config import ConfigError
from ..instance import is_damage, storage_problem
from ..protocol import ConnectError, internal_error, new_error_id, provider_error
from ..run import ErrorKind, ProviderError
from ..store import StoreError

log = logging.getLogger("cursor_byok.runtime")

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
    Cursor's "Provider Error" details (so the IDE shows the text, not a generic failure).

    Never retryable for the client: by the time a provider error ends a run the server has made
    every retry and failover it will make, so a client retrying the turn only multiplies provider
    calls (Cursor's SDK retried 3 more times, 12 calls in all). A rejected key is the user's own
    API key error, which Cursor's clients answer by pointing at the key settings."""
    from ..protocol import aiserver_pb2  # protobuf on first use (a run failed), not at import

    error = aiserver_pb2.ErrorDetails.Error.ERROR_BAD_USER_API_KEY if err.kind is ErrorKind.AUTH else None
    shown = provider_error(err.explain(), retryable=False, error=error)
    return ConnectError(_CONNECT_CODES.get(err.kind, "unavailable"), shown.message, shown.details)


def storage_error(doing: str, exc: BaseException, database: Path | None = None) -> ConnectError:
    """A store failure as a run's terminal: a damaged file is `data_loss` with the way out (retrying
    never helps); anything else `unavailable`."""
    code = "data_loss" if is_damage(exc) else "unavailable"
    return ConnectError(code, f"{doing}: {storage_problem(exc, database)}")


def run_error(exc: BaseException) -> ConnectError:
    """The terminal error of a run that ended with `exc`."""
    if isinstance(exc, ConnectError):
        return exc
    if isinstance(exc, ProviderError):
        return connect_error_for(exc)
    if isinstance(exc, ConfigError):
        return ConnectError("failed_precondition", str(exc))
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return ConnectError("deadline_exceeded", "timed out waiting for the client")
    if isinstance(exc, (StoreError, sqlite3.Error)):  # disk full, read-only, damaged: this run fails, loudly
        log.error("run failed: its conversation could not be saved", exc_info=exc)
        return storage_error("cannot save the conversation", exc)
    error_id = new_error_id()
    log.error("run failed with an unexpected error", exc_info=exc, extra={"error_id": error_id})
    return internal_error(error_id)  # the exception's text stays in the log


__all__ = ["connect_error_for", "run_error", "storage_error"]
