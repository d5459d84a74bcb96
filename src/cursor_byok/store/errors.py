"""Errors raised by the store. Every one derives from `StoreError`."""
from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BindingConflict",
    "ConstraintViolation",
    "DatabaseError",
    "FlushError",
    "MigrationError",
    "SchemaTooNewError",
    "StoreClosedError",
    "StoreError",
    "WriteFailedError",
]


class StoreError(Exception):
    """Base class of every store failure."""


class DatabaseError(StoreError):
    """The PostgreSQL backend's database refused or failed a statement (the driver's error is chained).
    The embedded backend raises sqlite3's errors as they are."""


class ConstraintViolation(DatabaseError):
    """A statement broke a constraint (unique key, foreign key, check), e.g. a seq another process
    took first: the transaction is rolled back, nothing of it is kept."""


class StoreClosedError(StoreError):
    """A write was enqueued (or a read issued) after `Store.close()`."""


class SchemaTooNewError(StoreError):
    """The database was written by a newer cursor-byok; opening it could corrupt it."""

    def __init__(self, path: str, found: int, supported: int) -> None:
        super().__init__(
            f"database {path} has schema version {found}, but this cursor-byok supports up to "
            f"{supported}; upgrade cursor-byok or point it at another data dir"
        )
        self.path = path
        self.found = found
        self.supported = supported


class MigrationError(StoreError):
    """A migration step failed; its transaction was rolled back, earlier versions stay applied."""

    def __init__(self, version: int, name: str, cause: BaseException) -> None:
        super().__init__(f"migration {version} ({name}) failed: {cause}")
        self.version = version
        self.name = name


class BindingConflict(StoreError):
    """A request_id already bound to one conversation was offered for another. Nothing is written."""

    def __init__(self, request_id: str, bound_conversation_id: str, requested_conversation_id: str):
        super().__init__(
            f"request_id {request_id!r} is bound to conversation {bound_conversation_id!r}, "
            f"not {requested_conversation_id!r}"
        )
        self.request_id = request_id
        self.bound_conversation_id = bound_conversation_id
        self.requested_conversation_id = requested_conversation_id


class WriteFailedError(StoreError):
    """One queued write could not be committed (the cause is chained). Its neighbours were kept."""

    def __init__(self, description: str, cause: BaseException) -> None:
        super().__init__(f"{description}: {type(cause).__name__}: {cause}")
        self.description = description
        self.__cause__ = cause


class FlushError(StoreError):
    """`Store.flush()` found writes that failed since the previous flush (each was also logged)."""

    def __init__(self, errors: Sequence[WriteFailedError]) -> None:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"{len(errors)} write(s) failed since the last flush: {first}{more}")
        self.errors = tuple(errors)
