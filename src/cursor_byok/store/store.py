"""The persistence driver: one SQLite database in WAL mode, one writer task, one read connection.

Writes are synchronous enqueue calls that return an `asyncio.Future` resolved after the write's
transaction has committed. A caller that must not acknowledge something before it is durable (a
frame to the client, a tool result) awaits the future; everyone else lets it go. The writer task
drains whatever is queued (up to `max_batch_ops`) into ONE transaction, so under load many writes
share one commit; if that transaction fails, the batch is replayed one write per transaction so a
bad write fails alone.

Durability: with `synchronous=NORMAL` (default) a committed transaction is in the WAL file when
its future resolves, so it survives the process being killed (`kill -9`, OOM); only an OS crash or
power loss can drop the last few transactions. `synchronous=FULL` also fsyncs each commit.

Reads use their own connection (WAL readers never block the writer) and are meant for startup,
recovery and the CLI; live state is held in memory by the callers.
"""
from __future__ import annotations

import asyncio
import collections
import enum
import hashlib
import logging
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite
import msgspec

from ._writes import (
    CONSUME_DELIVERY,
    ENQUEUE_DELIVERY,
    FINISH_RUN,
    INSERT_RUN,
    INSERT_USAGE,
    PROBE_EVENT_IDS,
    PROBE_SEQS,
    PUT_BLOB,
    UPDATE_RUN_PHASE,
    UPSERT_CONVERSATION,
    UPSERT_TOOL_STATE,
    UPSERT_TRACE,
    AppendEvents,
    Barrier,
    BatchContext,
    BindingIndex,
    BindRequest,
    Probe,
    PutCheckpoint,
    RowWrite,
    Stage,
    Statement,
    WriteOp,
    group_statements,
)
from .errors import (
    BlobCorruptError,
    FlushError,
    StoreClosedError,
    StoreError,
    WriteFailedError,
)
from .migrations import MIGRATIONS, Migration, apply_migrations, stored_version
from .records import (
    AppendResult,
    BindingRecord,
    BindOutcome,
    CheckpointKind,
    CheckpointRecord,
    ConversationRecord,
    DeliveryRecord,
    DeliveryState,
    EventRecord,
    NewEvent,
    ParentRef,
    RunOutcome,
    RunRecord,
    Synchronous,
    TraceRecord,
    UsageRecord,
    UsageTotals,
)

__all__ = ["Store", "StoreStats", "blob_id_of"]

log = logging.getLogger("cursor_byok.store")

# STRICT tables and the JSON functions used by the writer's probes.
_MIN_SQLITE = (3, 37, 0)
# Per-conversation seq counters are a cache (a miss costs one probe); bound its size.
_SEQ_CACHE_LIMIT = 100_000

_Bytes = (bytes, bytearray, memoryview)
_EVENT_KIND = re.compile(r"[a-z][a-z0-9_]{0,63}")


def blob_id_of(data: bytes) -> bytes:
    """The content address of `data`: its raw 32-byte SHA-256."""
    return hashlib.sha256(data).digest()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class StoreStats:
    """Writer counters, for tests, benchmarks and `doctor`."""

    batches: int = 0  # batches taken from the queue
    transactions: int = 0  # write transactions committed
    writes: int = 0  # writes committed
    failed_writes: int = 0
    isolation_replays: int = 0  # failed batches replayed one write per transaction


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: WriteFailedError) -> None:
        self.error = error


def _require_bytes(name: str, value: object) -> bytes:
    if not isinstance(value, _Bytes):
        raise TypeError(f"{name} must be bytes, got {type(value).__name__}")
    return bytes(value)


def _mark_retrieved(future: asyncio.Future[Any]) -> None:
    # The failure is logged and reported by flush(); a fire-and-forget caller must not also
    # get "Future exception was never retrieved" noise at garbage collection.
    if not future.cancelled():
        future.exception()


async def _connect(
    path: Path, *, synchronous: Synchronous, busy_timeout_ms: int, read_only: bool
) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path, isolation_level=None)
    try:
        await conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        rows = list(await conn.execute_fetchall("PRAGMA journal_mode = WAL"))
        if str(rows[0][0]).lower() != "wal":
            raise StoreError(f"could not put {path} into WAL mode (got {rows[0][0]!r})")
        await conn.execute(f"PRAGMA synchronous = {synchronous.value}")
        await conn.execute("PRAGMA foreign_keys = ON")
        if read_only:
            await conn.execute("PRAGMA query_only = ON")
    except BaseException:
        await conn.close()
        raise
    return conn


async def _pragma(conn: aiosqlite.Connection, name: str) -> Any:
    rows = list(await conn.execute_fetchall(f"PRAGMA {name}"))
    return rows[0][0]


_SYNCHRONOUS_LEVELS = {1: Synchronous.NORMAL, 2: Synchronous.FULL}


class Store:
    """See the module docstring. Create with `await Store.open(path)`; end with `await close()`."""

    def __init__(
        self,
        *,
        path: Path,
        writer: aiosqlite.Connection | None,
        reader: aiosqlite.Connection,
        clock: Callable[[], int],
        max_batch_ops: int,
        schema_version: int,
        synchronous: Synchronous,
    ) -> None:
        self.path = path
        self.schema_version = schema_version
        self.synchronous = synchronous  # as read back from the writer connection
        self.stats = StoreStats()
        self._writer_conn = writer
        self._reader = reader
        self._clock = clock
        self._max_batch_ops = max_batch_ops
        self._loop = asyncio.get_running_loop()
        self._queue: collections.deque[WriteOp] = collections.deque()
        self._wakeup: asyncio.Future[None] | None = None
        self._closing = False
        self._closed = False
        self._bindings = BindingIndex()
        self._seq_cache: dict[str, tuple[int, int]] = {}
        self._unreported: list[WriteFailedError] = []
        self._read_lock = asyncio.Lock()
        self._writer_task: asyncio.Task[None] | None = None

    # ----------------------------------------------------------------------------- lifecycle

    @classmethod
    async def open(
        cls,
        path: Path | str,
        *,
        synchronous: Synchronous | str = Synchronous.NORMAL,
        busy_timeout_ms: int = 5_000,
        max_batch_ops: int = 2_048,
        clock: Callable[[], int] | None = None,
        migrations: Sequence[Migration] = MIGRATIONS,
        read_only: bool = False,
    ) -> Store:
        """Open (creating it and its parent dirs if needed) and migrate the database at `path`.

        Raises SchemaTooNewError for a database written by a newer release and MigrationError
        if a migration fails (that migration is rolled back; earlier ones stay).
        `migrations` exists for upgrade tests and tooling; the server uses the default.
        `read_only`: the read connection only (no migrations, no writer task), for reading a
        database another process owns; every write raises StoreClosedError.
        """
        if sqlite3.sqlite_version_info < _MIN_SQLITE:
            raise StoreError(
                f"SQLite {sqlite3.sqlite_version} is too old; cursor-byok needs "
                f"{'.'.join(map(str, _MIN_SQLITE))} or newer"
            )
        if max_batch_ops < 1:
            raise ValueError("max_batch_ops must be at least 1")
        sync = Synchronous(synchronous.upper() if isinstance(synchronous, str) else synchronous)
        path = Path(path).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        writer = None if read_only else await _connect(
            path, synchronous=sync, busy_timeout_ms=busy_timeout_ms, read_only=False)
        reader: aiosqlite.Connection | None = None
        try:
            if writer is not None:
                version = await apply_migrations(writer, migrations, path=str(path))
                level = await _pragma(writer, "synchronous")
                if _SYNCHRONOUS_LEVELS.get(level) is not sync:
                    raise StoreError(f"could not set synchronous={sync.value} (got {level!r})")
            reader = await _connect(path, synchronous=sync, busy_timeout_ms=busy_timeout_ms,
                                    read_only=True)
            if writer is None:
                version = await stored_version(reader, migrations, path=str(path))
            store = cls(
                path=path,
                writer=writer,
                reader=reader,
                clock=clock or _now_ms,
                max_batch_ops=max_batch_ops,
                schema_version=version,
                synchronous=sync,
            )
            if version >= 1:
                rows = await reader.execute_fetchall(
                    "SELECT request_id, conversation_id FROM request_bindings"
                )
                store._bindings.load((str(r[0]), str(r[1])) for r in rows)
        except BaseException:
            if writer is not None:
                await writer.close()
            if reader is not None:
                await reader.close()
            raise
        if writer is not None:
            store._writer_task = asyncio.create_task(store._write_loop(), name=f"store-writer:{path}")
        return store

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closing

    async def flush(self) -> None:
        """Wait until every write queued before this call has committed or failed.

        Raises FlushError listing the writes that failed since the previous flush (whether or
        not their futures were awaited); each failure was also logged when it happened.
        """
        errors = await self._enqueue(Barrier())
        if errors:
            raise FlushError(errors)

    async def close(self) -> None:
        """Commit everything queued, stop the writer and close both connections. Idempotent.
        Failed writes are logged, not raised, here."""
        if self._closed:
            return
        self._closing = True
        self._wake()
        try:
            if self._writer_task is not None:
                await self._writer_task
        except Exception:
            log.exception("store writer of %s had stopped with an error", self.path)
        finally:
            self._closed = True
            await self._reader.close()
            if self._writer_conn is not None:
                await self._writer_conn.close()

    # -------------------------------------------------------------------------------- writes

    def upsert_conversation(self, record: ConversationRecord) -> asyncio.Future[None]:
        """Insert or update a conversation. `created_at_ms` of an existing row is kept; its parent
        ref is immutable (a different one fails the write)."""
        parent = record.parent
        if parent is not None and not isinstance(parent, ParentRef):
            raise TypeError(f"parent must be a ParentRef or None, got {type(parent).__name__}")
        row = (
            record.conversation_id,
            parent.parent_conversation_id if parent else None,
            parent.parent_run_id if parent else None,
            parent.parent_tool_call_id if parent else None,
            record.model_id,
            record.mode,
            record.created_at_ms,
            record.updated_at_ms,
            record.last_cursor_run_id,
            record.title,
        )
        return self._enqueue(
            RowWrite(f"upsert conversation {record.conversation_id}", Stage.CONVERSATIONS,
                     UPSERT_CONVERSATION, row)
        )

    def bind_request(
        self,
        request_id: str,
        conversation_id: str,
        cursor_run_id: str | None = None,
        *,
        created_at_ms: int | None = None,
    ) -> asyncio.Future[BindOutcome]:
        """Bind `request_id` to `conversation_id`.

        Raises BindingConflict right away (nothing queued) if the request_id is bound, or being
        bound, to another conversation. Binding it again to the same conversation is idempotent
        (a given cursor_run_id replaces the stored one) and resolves to ALREADY_BOUND.
        """
        self._check_writable()
        if not request_id or not conversation_id:
            raise ValueError("request_id and conversation_id must be non-empty")
        reserved = self._bindings.reserve(request_id, conversation_id)
        row = (request_id, conversation_id, cursor_run_id,
               self._clock() if created_at_ms is None else created_at_ms)
        return self._enqueue(BindRequest(self._bindings, row, reserved))

    def bound_conversation(self, request_id: str) -> str | None:
        """The conversation a request_id is bound (or being bound) to, from memory."""
        return self._bindings.get(request_id)

    def start_run(self, record: RunRecord) -> asyncio.Future[None]:
        if record.outcome is not None or record.ended_at_ms is not None:
            raise ValueError("start_run takes an active run (outcome and ended_at_ms None)")
        row = (record.run_id, record.conversation_id, record.cursor_run_id, record.request_id,
               record.phase, record.started_at_ms)
        return self._enqueue(RowWrite(f"start run {record.run_id}", Stage.RUNS, INSERT_RUN, row))

    def update_run_phase(self, run_id: str, phase: str) -> asyncio.Future[None]:
        """Record the phase of an active run; a no-op once the run has finished."""
        return self._enqueue(
            RowWrite(f"update phase of run {run_id}", Stage.RUNS, UPDATE_RUN_PHASE, (phase, run_id))
        )

    def finish_run(
        self,
        run_id: str,
        outcome: RunOutcome | str,
        *,
        ended_at_ms: int | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> asyncio.Future[None]:
        """Set a run's outcome. The first outcome wins; finishing an ended run is a no-op."""
        outcome = RunOutcome(outcome)
        ended = self._clock() if ended_at_ms is None else ended_at_ms
        row = (outcome.value, error_code, error_message, ended, run_id)
        return self._enqueue(RowWrite(f"finish run {run_id}", Stage.RUNS, FINISH_RUN, row))

    def append_events(
        self, conversation_id: str, events: Iterable[NewEvent]
    ) -> asyncio.Future[AppendResult]:
        """Append events to a conversation's history, in order.

        Seqs are assigned at commit time in queue order: gap-free per conversation, continuing
        after the highest stored seq across restarts. An event whose event_id is already stored
        (or appears earlier in the same call) is not stored again and is reported as a duplicate.
        """
        checked = []
        for event in events:
            # Store the plain value: str() of a (str, Enum) member would be "Cls.MEMBER".
            kind = event.kind.value if isinstance(event.kind, enum.Enum) else event.kind
            if not isinstance(kind, str) or not _EVENT_KIND.fullmatch(kind):
                raise ValueError(f"event kind must be a lowercase identifier, got {kind!r}")
            payload = _require_bytes("event payload", event.payload)
            if not isinstance(event.event_id, str) or not event.event_id:
                raise ValueError("event_id must be a non-empty string")
            if kind is not event.kind or payload is not event.payload:
                event = msgspec.structs.replace(event, kind=kind, payload=payload)
            checked.append(event)
        return self._enqueue(AppendEvents(conversation_id, tuple(checked), self._clock()))

    def put_checkpoint(
        self,
        conversation_id: str,
        state: bytes,
        *,
        kind: CheckpointKind | str,
        run_id: str | None = None,
        through_event_seq: int | None = None,
        created_at_ms: int | None = None,
    ) -> asyncio.Future[CheckpointRecord]:
        """Store a serialized conversation state as the conversation's next checkpoint.

        `through_event_seq` defaults to the last event seq appended before this call (queue
        order); an explicit value beyond that fails the write.
        """
        op = PutCheckpoint(
            conversation_id,
            _require_bytes("checkpoint state", state),
            CheckpointKind(kind),
            run_id,
            through_event_seq,
            self._clock() if created_at_ms is None else created_at_ms,
        )
        return self._enqueue(op)

    def put_blob(self, data: bytes) -> asyncio.Future[bytes]:
        """Store `data` under its SHA-256; idempotent. Resolves to the blob id (also available
        synchronously from `blob_id_of(data)`)."""
        data = _require_bytes("blob data", data)
        blob_id = blob_id_of(data)
        return self._enqueue(
            RowWrite(f"put blob {blob_id.hex()[:16]}", Stage.BLOBS, PUT_BLOB,
                     (blob_id, data, self._clock()), result=blob_id)
        )

    def put_tool_state(self, conversation_id: str, state: bytes) -> asyncio.Future[None]:
        """Replace the conversation's tool state (opaque bytes; the conversation must exist)."""
        row = (conversation_id, _require_bytes("tool state", state), self._clock())
        return self._enqueue(
            RowWrite(f"put tool state of {conversation_id}", Stage.CHECKPOINTS, UPSERT_TOOL_STATE, row)
        )

    def record_trace(self, record: TraceRecord) -> asyncio.Future[None]:
        """Insert a trace, or update the end-of-request fields of an existing one."""
        row = (record.trace_id, record.request_id, record.conversation_id, record.route,
               record.method, record.path, record.status, record.bytes_in, record.bytes_out,
               record.started_at_ms, record.duration_ms)
        return self._enqueue(
            RowWrite(f"record trace {record.trace_id}", Stage.TRACES, UPSERT_TRACE, row)
        )

    def record_usage(self, record: UsageRecord) -> asyncio.Future[None]:
        row = (record.run_id, record.conversation_id, record.model_id, record.provider,
               record.input_tokens, record.output_tokens, record.cache_read_tokens,
               record.cache_write_tokens, record.reasoning_tokens, record.ttft_ms,
               record.duration_ms, record.created_at_ms)
        return self._enqueue(
            RowWrite(f"record usage of {record.model_id}", Stage.USAGE, INSERT_USAGE, row)
        )

    def enqueue_delivery(
        self,
        conversation_id: str,
        delivery_id: str,
        payload: bytes,
        *,
        created_at_ms: int | None = None,
    ) -> asyncio.Future[None]:
        """Record a background completion for delivery into `conversation_id`. Enqueueing the same
        delivery_id again is a no-op; one already consumed stays consumed."""
        row = (conversation_id, delivery_id, _require_bytes("delivery payload", payload),
               self._clock() if created_at_ms is None else created_at_ms)
        return self._enqueue(
            RowWrite(f"enqueue delivery {delivery_id}", Stage.DELIVERIES, ENQUEUE_DELIVERY, row)
        )

    def consume_delivery(
        self, conversation_id: str, delivery_id: str, *, consumed_at_ms: int | None = None
    ) -> asyncio.Future[None]:
        """Mark a delivery consumed; idempotent. Consuming before enqueueing is allowed and makes
        the later enqueue a no-op (the completion was taken another way)."""
        now = self._clock() if consumed_at_ms is None else consumed_at_ms
        row = (conversation_id, delivery_id, now, now)
        return self._enqueue(
            RowWrite(f"consume delivery {delivery_id}", Stage.DELIVERIES, CONSUME_DELIVERY, row)
        )

    # --------------------------------------------------------------------------------- reads

    async def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        rows = await self._read(f"{_CONVERSATION_SELECT} WHERE conversation_id = ?",
                                (conversation_id,))
        return _conversation(rows[0]) if rows else None

    async def list_conversations(self, limit: int = 50, offset: int = 0) -> list[ConversationRecord]:
        """Most recently updated first."""
        rows = await self._read(
            f"{_CONVERSATION_SELECT} ORDER BY updated_at_ms DESC, conversation_id LIMIT ? OFFSET ?",
            (limit, offset),
        )
        return [_conversation(r) for r in rows]

    async def find_conversation_ids(self, prefix: str, limit: int = 2) -> list[str]:
        """Ids starting with `prefix`, in order, at most `limit` (a primary-key range scan)."""
        if not prefix:
            return []
        # Every string with the prefix sorts in [prefix, prefix with its last character bumped).
        upper = prefix[:-1] + chr(min(ord(prefix[-1]) + 1, 0x10FFFF))
        rows = await self._read(
            "SELECT conversation_id FROM conversations WHERE conversation_id >= ? AND conversation_id < ? "
            "ORDER BY conversation_id LIMIT ?",
            (prefix, upper, limit),
        )
        return [str(r[0]) for r in rows]

    async def usage_by_run(self, conversation_id: str, limit: int = 1000) -> dict[str, UsageTotals]:
        """Token usage summed per run of one conversation (newest runs first, at most `limit`)."""
        rows = await self._read(
            "SELECT run_id, provider, model_id, COUNT(*), SUM(input_tokens), SUM(output_tokens), "
            "SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(reasoning_tokens), "
            "COALESCE(SUM(duration_ms), 0), AVG(ttft_ms) FROM usage "
            "WHERE conversation_id = ? AND run_id IS NOT NULL GROUP BY run_id "
            "ORDER BY MAX(created_at_ms) DESC LIMIT ?",
            (conversation_id, limit),
        )
        return {str(r[0]): UsageTotals(*r[1:]) for r in rows}

    async def lookup_binding(self, request_id: str) -> BindingRecord | None:
        rows = await self._read(
            "SELECT request_id, conversation_id, cursor_run_id, created_at_ms "
            "FROM request_bindings WHERE request_id = ?",
            (request_id,),
        )
        return BindingRecord(*rows[0]) if rows else None

    async def get_run(self, run_id: str) -> RunRecord | None:
        rows = await self._read(f"{_RUN_SELECT} WHERE run_id = ?", (run_id,))
        return _run(rows[0]) if rows else None

    async def list_runs(self, conversation_id: str) -> list[RunRecord]:
        rows = await self._read(
            f"{_RUN_SELECT} WHERE conversation_id = ? ORDER BY started_at_ms, run_id",
            (conversation_id,),
        )
        return [_run(r) for r in rows]

    async def find_unfinished_runs(self) -> list[RunRecord]:
        """Runs without an outcome: after a crash these are the ones to mark
        INTERRUPTED_BY_CRASH (and resume from their conversation's latest checkpoint)."""
        rows = await self._read(
            f"{_RUN_SELECT} WHERE outcome IS NULL ORDER BY started_at_ms, run_id", ()
        )
        return [_run(r) for r in rows]

    async def load_events(
        self, conversation_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        rows = await self._read(
            f"{_EVENT_SELECT} WHERE conversation_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (conversation_id, after_seq, -1 if limit is None else limit),
        )
        return [_event(r) for r in rows]

    async def last_event_seq(self, conversation_id: str) -> int:
        rows = await self._read(
            "SELECT COALESCE(MAX(seq), 0) FROM history_events WHERE conversation_id = ?",
            (conversation_id,),
        )
        return int(rows[0][0])

    async def latest_checkpoint(self, conversation_id: str) -> CheckpointRecord | None:
        rows = await self._read(
            f"{_CHECKPOINT_SELECT} WHERE conversation_id = ? ORDER BY seq DESC LIMIT 1",
            (conversation_id,),
        )
        return _checkpoint(rows[0]) if rows else None

    async def list_checkpoints(self, conversation_id: str) -> list[CheckpointRecord]:
        rows = await self._read(
            f"{_CHECKPOINT_SELECT} WHERE conversation_id = ? ORDER BY seq", (conversation_id,)
        )
        return [_checkpoint(r) for r in rows]

    async def get_tool_state(self, conversation_id: str) -> bytes | None:
        rows = await self._read(
            "SELECT state FROM conversation_tool_state WHERE conversation_id = ?", (conversation_id,)
        )
        return bytes(rows[0][0]) if rows else None

    async def get_blob(self, blob_id: bytes) -> bytes | None:
        """The blob's bytes, None if absent; BlobCorruptError if they do not hash to `blob_id`."""
        rows = await self._read("SELECT data FROM blobs WHERE blob_id = ?", (bytes(blob_id),))
        if not rows:
            return None
        data = bytes(rows[0][0])
        if blob_id_of(data) != blob_id:
            raise BlobCorruptError(bytes(blob_id))
        return data

    async def has_blob(self, blob_id: bytes) -> bool:
        rows = await self._read("SELECT 1 FROM blobs WHERE blob_id = ?", (bytes(blob_id),))
        return bool(rows)

    async def list_traces(
        self, *, conversation_id: str | None = None, limit: int = 100
    ) -> list[TraceRecord]:
        """Most recent first."""
        where, params = ("WHERE conversation_id = ?", [conversation_id]) if conversation_id else ("", [])
        rows = await self._read(
            "SELECT trace_id, route, method, path, started_at_ms, request_id, conversation_id, "
            f"status, bytes_in, bytes_out, duration_ms FROM traces {where} "
            "ORDER BY started_at_ms DESC, trace_id LIMIT ?",
            (*params, limit),
        )
        return [TraceRecord(*r) for r in rows]

    async def usage_summary(
        self,
        *,
        conversation_id: str | None = None,
        run_id: str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
    ) -> list[UsageTotals]:
        """Usage totals per (provider, model_id), filtered by the given bounds
        (`since_ms` inclusive, `until_ms` exclusive)."""
        clauses: list[str] = []
        params: list[Any] = []
        for clause, value in (
            ("conversation_id = ?", conversation_id),
            ("run_id = ?", run_id),
            ("created_at_ms >= ?", since_ms),
            ("created_at_ms < ?", until_ms),
        ):
            if value is not None:
                clauses.append(clause)
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = await self._read(
            "SELECT provider, model_id, COUNT(*), SUM(input_tokens), SUM(output_tokens), "
            "SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(reasoning_tokens), "
            f"COALESCE(SUM(duration_ms), 0), AVG(ttft_ms) FROM usage {where} "
            "GROUP BY provider, model_id ORDER BY provider, model_id",
            tuple(params),
        )
        return [UsageTotals(*r) for r in rows]

    async def pending_deliveries(self, conversation_id: str) -> list[DeliveryRecord]:
        """Deliveries not yet consumed, oldest first."""
        rows = await self._read(
            f"{_DELIVERY_SELECT} WHERE conversation_id = ? AND state = 'pending' "
            "ORDER BY created_at_ms, delivery_id",
            (conversation_id,),
        )
        return [_delivery(r) for r in rows]

    async def export_conversation(self, conversation_id: str) -> dict[str, Any] | None:
        """Everything stored about one conversation as JSON-able builtins (bytes as base64),
        read from one consistent snapshot. None if the conversation does not exist."""
        async with self._read_lock:
            self._check_open()
            await self._reader.execute("BEGIN")
            try:
                conversation = await self.get_conversation(conversation_id)
                if conversation is None:
                    return None
                bindings = await self._read(
                    "SELECT request_id, conversation_id, cursor_run_id, created_at_ms "
                    "FROM request_bindings WHERE conversation_id = ? ORDER BY created_at_ms, "
                    "request_id",
                    (conversation_id,),
                )
                deliveries = await self._read(
                    f"{_DELIVERY_SELECT} WHERE conversation_id = ? "
                    "ORDER BY created_at_ms, delivery_id",
                    (conversation_id,),
                )
                export = {
                    "schema_version": self.schema_version,
                    "conversation": conversation,
                    "bindings": [BindingRecord(*r) for r in bindings],
                    "runs": await self.list_runs(conversation_id),
                    "events": await self.load_events(conversation_id),
                    "checkpoints": await self.list_checkpoints(conversation_id),
                    "deliveries": [_delivery(r) for r in deliveries],
                    "usage": await self.usage_summary(conversation_id=conversation_id),
                    "traces": await self.list_traces(conversation_id=conversation_id, limit=-1),
                }
            finally:
                await self._reader.execute("COMMIT")
        return msgspec.to_builtins(export)

    # ------------------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closing:
            raise StoreClosedError(f"store {self.path} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._writer_conn is None:
            raise StoreClosedError(f"store {self.path} is open read-only")

    async def _read(self, sql: str, params: Sequence[Any]) -> list[Any]:
        if self._closed:
            raise StoreClosedError(f"store {self.path} is closed")
        return list(await self._reader.execute_fetchall(sql, params))

    def _enqueue(self, op: WriteOp) -> asyncio.Future[Any]:
        self._check_writable()
        future: asyncio.Future[Any] = self._loop.create_future()
        op.future = future
        self._queue.append(op)
        self._wake()
        return future

    def _wake(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    async def _write_loop(self) -> None:
        queue = self._queue
        batch: list[WriteOp] = []
        try:
            while True:
                if not queue:
                    if self._closing:
                        return
                    self._wakeup = self._loop.create_future()
                    await self._wakeup
                    self._wakeup = None
                    continue
                count = min(len(queue), self._max_batch_ops)
                batch = [queue.popleft() for _ in range(count)]
                self.stats.batches += 1
                await self._commit_batch(batch)
                batch = []
        except BaseException as exc:
            # A cancelled writer (event loop shutting down) or a bug: never leave a caller
            # waiting on a future nobody will resolve.
            self._closing = True
            error = StoreClosedError(f"store writer stopped: {exc!r}")
            for op in [*batch, *queue]:
                if not op.future.done():
                    op.future.set_exception(error)
                    _mark_retrieved(op.future)
            queue.clear()
            raise

    async def _commit_batch(self, batch: list[WriteOp]) -> None:
        writes = [op for op in batch if not isinstance(op, Barrier)]
        results: list[Any] = []
        if writes:
            try:
                results = await self._transaction(writes)
            except Exception as exc:
                if len(writes) == 1:
                    results = [_Failed(WriteFailedError(writes[0].describe(), exc))]
                else:
                    # Find the bad write(s): replay one per transaction so the others commit.
                    self.stats.isolation_replays += 1
                    results = []
                    for op in writes:
                        try:
                            results.extend(await self._transaction([op]))
                        except Exception as single_exc:
                            results.append(_Failed(WriteFailedError(op.describe(), single_exc)))
        outcomes = iter(results)
        for op in batch:
            future = op.future
            if isinstance(op, Barrier):
                reported, self._unreported = self._unreported, []
                if not future.done():
                    future.set_result(reported)
                continue
            outcome = next(outcomes)
            if isinstance(outcome, _Failed):
                op.failed()
                self.stats.failed_writes += 1
                self._unreported.append(outcome.error)
                log.error("store write failed: %s", outcome.error)
                if not future.done():
                    future.set_exception(outcome.error)
                    _mark_retrieved(future)
            else:
                value = op.committed(outcome)
                self.stats.writes += 1
                if not future.done():  # the waiter may have been cancelled; the write stands
                    future.set_result(value)

    async def _transaction(self, ops: list[WriteOp]) -> list[Any]:
        """Run `ops` in one transaction; returns each op's planned result (or _Failed for an op
        that refused to plan). Raises, with everything rolled back, if the transaction fails."""
        conn = self._writer_conn
        await conn.execute("BEGIN IMMEDIATE")
        try:
            probe = await self._probe(ops)
            ctx, results, statements = self._plan(ops, probe)
            for sql, rows in group_statements(statements):
                await conn.executemany(sql, rows)
            await conn.execute("COMMIT")
        except BaseException:
            try:
                await conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite already rolled back (e.g. after SQLITE_FULL)
            # Re-probe these conversations next time rather than trust counters the failed
            # transaction may have disagreed with.
            for op in ops:
                for conversation_id in op.seq_conversations():
                    self._seq_cache.pop(conversation_id, None)
            raise
        self.stats.transactions += 1
        if len(self._seq_cache) > _SEQ_CACHE_LIMIT:
            self._seq_cache.clear()
        ctx.commit_into(self._seq_cache)
        return results

    async def _probe(self, ops: list[WriteOp]) -> Probe:
        conversations: set[str] = set()
        keys: list[tuple[str, str]] = []
        for op in ops:
            conversations.update(op.seq_conversations())
            keys.extend(op.event_keys())
        missing = [c for c in conversations if c not in self._seq_cache]
        seqs: dict[str, tuple[int, int]] = {}
        if missing:
            rows = await self._writer_conn.execute_fetchall(
                PROBE_SEQS, (msgspec.json.encode(missing).decode(),)
            )
            seqs = {str(r[0]): (int(r[1]), int(r[2])) for r in rows}
        existing: dict[tuple[str, str], int] = {}
        if keys:
            rows = await self._writer_conn.execute_fetchall(
                PROBE_EVENT_IDS, (msgspec.json.encode(keys).decode(),)
            )
            existing = {(str(r[0]), str(r[1])): int(r[2]) for r in rows}
        return Probe(seqs, existing)

    def _plan(
        self, ops: list[WriteOp], probe: Probe
    ) -> tuple[BatchContext, list[Any], list[Statement]]:
        refused: dict[int, _Failed] = {}
        while True:
            ctx = BatchContext(self._seq_cache, probe)
            statements: list[Statement] = []
            results: list[Any] = []
            for index, op in enumerate(ops):
                if index in refused:
                    results.append(refused[index])
                    continue
                try:
                    results.append(op.plan(ctx, statements))
                except Exception as exc:
                    # Plan again without it, from a clean context.
                    refused[index] = _Failed(WriteFailedError(op.describe(), exc))
                    break
            else:
                return ctx, results, statements


_CONVERSATION_SELECT = (
    "SELECT conversation_id, created_at_ms, updated_at_ms, parent_conversation_id, "
    "parent_run_id, parent_tool_call_id, model_id, mode, last_cursor_run_id, title "
    "FROM conversations"
)
_RUN_SELECT = (
    "SELECT run_id, conversation_id, phase, started_at_ms, cursor_run_id, request_id, outcome, "
    "error_code, error_message, ended_at_ms FROM runs"
)
_EVENT_SELECT = (
    "SELECT conversation_id, seq, event_id, kind, payload, created_at_ms, run_id "
    "FROM history_events"
)
_CHECKPOINT_SELECT = (
    "SELECT conversation_id, seq, through_event_seq, kind, state, created_at_ms, run_id "
    "FROM checkpoints"
)
_DELIVERY_SELECT = (
    "SELECT conversation_id, delivery_id, state, created_at_ms, payload, consumed_at_ms "
    "FROM background_deliveries"
)


def _conversation(row: Sequence[Any]) -> ConversationRecord:
    parent = None
    if row[3] is not None:
        parent = ParentRef(row[3], row[4], row[5])
    return ConversationRecord(
        conversation_id=row[0],
        created_at_ms=row[1],
        updated_at_ms=row[2],
        parent=parent,
        model_id=row[6],
        mode=row[7],
        last_cursor_run_id=row[8],
        title=row[9],
    )


def _run(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        run_id=row[0],
        conversation_id=row[1],
        phase=row[2],
        started_at_ms=row[3],
        cursor_run_id=row[4],
        request_id=row[5],
        outcome=None if row[6] is None else RunOutcome(row[6]),
        error_code=row[7],
        error_message=row[8],
        ended_at_ms=row[9],
    )


def _event(row: Sequence[Any]) -> EventRecord:
    return EventRecord(
        conversation_id=row[0],
        seq=row[1],
        event_id=row[2],
        kind=row[3],
        payload=row[4],
        created_at_ms=row[5],
        run_id=row[6],
    )


def _checkpoint(row: Sequence[Any]) -> CheckpointRecord:
    return CheckpointRecord(
        conversation_id=row[0],
        seq=row[1],
        through_event_seq=row[2],
        kind=CheckpointKind(row[3]),
        state=row[4],
        created_at_ms=row[5],
        run_id=row[6],
    )


def _delivery(row: Sequence[Any]) -> DeliveryRecord:
    return DeliveryRecord(
        conversation_id=row[0],
        delivery_id=row[1],
        state=DeliveryState(row[2]),
        created_at_ms=row[3],
        payload=row[4],
        consumed_at_ms=row[5],
    )
