"""The capture's writer thread: decodes each finished exchange, groups the exchanges of one stream
(a RunSSE with its BidiAppends, one `Run`, one side RPC) and writes each stream as one JSON file.

A stream's file is written once its stream exchange has ended (appends that finish after it write
it again); appends whose RunSSE never came are written when the capture stops.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import queue
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ..protocol import BIDI_APPEND_PATH
from .redact import Redactor
from .tap import Exchange

__all__ = ["FORMAT", "CaptureWriter"]

log = logging.getLogger("cursor_byok.capture")

FORMAT = "cursor-byok-capture/1"
FLUSH_SECONDS = 1.0  # a stream's file is written when the queue runs dry, or at least this often
MAX_GROUPS = 512  # streams kept in memory for late appends; the oldest written ones go first
# The thread holds the GIL while it decodes: after this much work it rests REST_RATIO times as long,
# so a backlog (a busy server, a long stream) never takes more than a share of the loop's time.
WORK_SLICE_SECONDS = 0.0005
REST_RATIO = 3.0


MAX_BACKLOG_BYTES = 256 * 1024 * 1024  # exchanges waiting beyond this are dropped (and counted), not queued


class Pacer:
    """Called between units of work: rests once a slice of work is spent (this thread's CPU time,
    not the time it waited for the GIL)."""

    def __init__(self, work: float = WORK_SLICE_SECONDS, rest_ratio: float = REST_RATIO) -> None:
        self._work = work
        self._rest = work * rest_ratio
        self._since = time.thread_time()
        self.hurry = False  # set once the capture stops: what is left is written at full speed

    def __call__(self) -> None:
        if not self.hurry and time.thread_time() - self._since >= self._work:
            time.sleep(self._rest)
            self._since = time.thread_time()
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class _Group:
    serial: int
    kind: str
    key: str
    records: list[dict[str, Any]] = field(default_factory=list)
    wall: float = 0.0
    ready: bool = False  # its stream exchange has ended
    written: bool = False
    dirty: bool = False  # changed since its file was written


class CaptureWriter:
    def __init__(self, directory: Path, redactor: Redactor) -> None:
        self.directory = directory
        self.redactor = redactor
        self.written = 0  # files written (a file written again counts once)
        self.dropped = 0  # exchanges not recorded: the backlog was full
        # bytes queued (written by the loop only) and taken (by the thread only): their difference waits
        self._queued_bytes = 0
        self._taken_bytes = 0
        self._queue: queue.Queue[Exchange | None] = queue.Queue()
        self._groups: OrderedDict[tuple[str, str], _Group] = OrderedDict()
        self._serial = 0
        self._pace = Pacer()
        self._thread = threading.Thread(target=self._run, name="cursor-byok-capture", daemon=True)
        self._thread.start()

    def submit(self, exchange: Exchange) -> None:
        """From the loop: one put (or a drop, when the thread is that far behind)."""
        if self._queued_bytes - self._taken_bytes > MAX_BACKLOG_BYTES:
            self.dropped += 1
            return
        self._queued_bytes += exchange.kept
        self._queue.put(exchange)

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def close(self) -> None:
        """Write everything submitted so far, then stop (blocks: call it off the loop)."""
        self._pace.hurry = True
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        from .record import record_of  # protobuf and the protocol: in this thread, on first use

        pace = self._pace
        flushed = time.monotonic()
        while True:
            exchange = self._queue.get()
            if exchange is None:
                self._flush(everything=True)
                return
            try:
                self._serial += 1
                key, record = record_of(exchange, self.redactor, self._serial, pace)
                self._add(key, record, exchange)
                pace()
            except Exception:  # noqa: BLE001 - a capture must never take the server down
                log.exception("capture: an exchange could not be recorded", extra={"path": exchange.path[:200]})
            finally:
                self._taken_bytes += exchange.kept
            # Files are written in batches: a stream whose appends keep arriving is written once per
            # batch, not once per append (each write is the whole stream again).
            if self._queue.empty() or time.monotonic() - flushed >= FLUSH_SECONDS:
                self._flush()
                flushed = time.monotonic()

    def _flush(self, *, everything: bool = False) -> None:
        """Write the streams changed since their last write (`everything`: and those never written)."""
        for group in self._groups.values():
            if group.dirty or (everything and not group.written):
                try:
                    self._write(group)
                except OSError:  # a full disk, a removed folder: the server goes on, the log says so
                    log.exception("capture: a stream could not be written", extra={"capture_dir": str(self.directory)})
                    group.dirty = False
                self._pace()

    def _add(self, key: tuple[str, str], record: dict[str, Any], exchange: Exchange) -> None:
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(self._serial, *key, wall=exchange.wall)
            self._evict()
        group.records.append(record)
        group.wall = min(group.wall, exchange.wall)
        if record["path"] != BIDI_APPEND_PATH:
            group.ready = True
        group.dirty = group.ready

    def _evict(self) -> None:
        while len(self._groups) > MAX_GROUPS:
            oldest_key = next((k for k, g in self._groups.items() if g.written), next(iter(self._groups)))
            group = self._groups.pop(oldest_key)
            if group.dirty or not group.written:
                self._write(group)  # an OSError: that exchange is logged as not recorded

    def _write(self, group: _Group) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = f"{group.serial:05d}-{group.kind}-{_UNSAFE.sub('_', group.key)[:40]}.json"
        tmp = self.directory / f".{name}.tmp"
        # msgspec: the standard encoder with an indent is the pure-Python one (~10 µs a frame)
        tmp.write_bytes(msgspec.json.format(msgspec.json.encode(document(group, self.redactor.with_content)), indent=1))
        os.replace(tmp, self.directory / name)
        if not group.written:
            self.written += 1
        group.written = True
        group.dirty = False


def document(group: _Group, with_content: bool) -> dict[str, Any]:
    """A stream's file: its exchanges in the order they started, every time as milliseconds since
    the stream's first exchange started."""
    records = sorted(group.records, key=lambda r: r["at"])
    start = records[0]["at"]

    def offset(t: float) -> float:
        return round((t - start) * 1000, 1)

    exchanges = []
    for record in records:
        frames = [{"dir": f["dir"], "at_ms": offset(f["at"]), **{k: v for k, v in f.items() if k not in ("dir", "at")}} for f in record["frames"]]
        exchange = {k: v for k, v in record.items() if k not in ("at", "frames", "client_disconnected_at")}
        exchange["at_ms"] = offset(record["at"])
        if "client_disconnected_at" in record:
            exchange["client_disconnected_at_ms"] = offset(record["client_disconnected_at"])
        exchange["frames"] = frames
        exchanges.append(exchange)
    return {
        "format": FORMAT,
        "kind": group.kind,
        "key": group.key,
        "started_at": dt.datetime.fromtimestamp(group.wall, dt.timezone.utc).isoformat(timespec="milliseconds"),
        "redacted": not with_content,
        "exchanges": exchanges,
    }
