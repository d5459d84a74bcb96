"""The data dir's one owner: an exclusive OS lock on `<data dir>/server.lock`.

The process that writes the database holds the lock for its whole life. The kernel releases it when
that process ends, however it ends (SIGKILL, OOM, a crash), so a file left behind never blocks a
restart. The file's text (PID, address, start time) only describes the holder for messages and
`doctor`; it is written after the lock is taken, and whether anyone holds the lock is asked of the
OS, never read from the file.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import time
from pathlib import Path

import msgspec

LOCK_FILE_NAME = "server.lock"
ACQUIRE_PATIENCE_SECONDS = 0.5  # a probe (doctor, the CLI) holds the lock for microseconds: wait it out

if os.name == "nt":  # pragma: no cover - exercised on Windows only
    import msvcrt

    _LOCKED_BYTE = 1 << 20  # a byte past the record, so readers of the record are never blocked

    def _try_lock(fd: int, *, exclusive: bool) -> bool:
        os.lseek(fd, _LOCKED_BYTE, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK if exclusive else msvcrt.LK_NBRLCK, 1)
        except OSError:
            return False
        return True

    def _unlock(fd: int) -> None:
        os.lseek(fd, _LOCKED_BYTE, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _try_lock(fd: int, *, exclusive: bool) -> bool:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


class DataDirError(Exception):
    """The data dir (or its database) cannot be used; the message names the cause and the fix."""


class Holder(msgspec.Struct, frozen=True):
    """Who holds a data dir, as its lock file describes it (None fields: not recorded yet)."""

    pid: int | None = None
    command: str = "serve"
    address: str | None = None  # host:port a server listens on
    started_at: str | None = None  # local time, seconds

    def describe(self) -> str:
        if self.pid is None:
            return "another cursor-byok process (starting up)"
        details = [f"PID {self.pid}"]
        if self.address:
            details.append(f"listening on {self.address}")
        if self.started_at:
            details.append(f"since {self.started_at}")
        return f"cursor-byok {self.command} ({', '.join(details)})"


class DataDirBusy(DataDirError):
    def __init__(self, data_dir: Path, holder: Holder) -> None:
        super().__init__(
            f"data dir {data_dir} is in use by {holder.describe()}: stop that one first, "
            "or give this one its own data dir (--data-dir)"
        )
        self.holder = holder


class DataDirLock:
    """The held lock. `acquire()` takes it or raises; `release()` (or process exit) gives it back."""

    def __init__(self, data_dir: Path, fd: int) -> None:
        self.data_dir = data_dir
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: Path, *, patience: float = ACQUIRE_PATIENCE_SECONDS) -> DataDirLock:
        """Create the data dir if needed and take its lock. Raises DataDirBusy naming the holder
        (after `patience` seconds of retrying), or DataDirError when the data dir cannot be written."""
        path = data_dir / LOCK_FILE_NAME
        try:
            data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            raise _unusable(data_dir, exc) from None
        deadline = time.monotonic() + patience
        while not _try_lock(fd, exclusive=True):
            if time.monotonic() >= deadline:
                holder = _read(fd)
                os.close(fd)
                raise DataDirBusy(data_dir, holder)
            time.sleep(0.02)
        os.ftruncate(fd, 0)  # whatever an earlier holder wrote no longer describes anyone
        return cls(data_dir, fd)

    def record(self, *, command: str = "serve", address: str | None = None) -> None:
        """Describe this process as the holder (after the lock is taken: a reader that finds the
        lock held but the record empty says "starting up")."""
        assert self._fd is not None
        started = dt.datetime.now().astimezone().isoformat(sep=" ", timespec="seconds")
        text = json.dumps({"pid": os.getpid(), "command": command, "address": address, "started_at": started})
        try:
            os.ftruncate(self._fd, 0)
            os.lseek(self._fd, 0, os.SEEK_SET)
            os.write(self._fd, text.encode() + b"\n")
        except OSError as exc:
            raise _unusable(self.data_dir, exc) from None

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            with contextlib.suppress(OSError):  # the record is a description only
                os.ftruncate(fd, 0)
            _unlock(fd)
        finally:
            os.close(fd)

    def __enter__(self) -> DataDirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _unusable(data_dir: Path, exc: OSError) -> DataDirError:
    fix = "free disk space" if exc.errno == errno.ENOSPC else "make it writable, or point --data-dir elsewhere"
    return DataDirError(f"cannot use data dir {data_dir}: {exc.strerror or exc}: {fix}")


def lock_holder(data_dir: Path) -> Holder | None:
    """Who holds the data dir's lock right now, or None when nobody does (no file, or a file left
    by a process that has ended: that is not an error)."""
    try:
        fd = os.open(data_dir / LOCK_FILE_NAME, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        if _try_lock(fd, exclusive=False):
            _unlock(fd)
            return None
        return _read(fd)
    finally:
        os.close(fd)


def _read(fd: int) -> Holder:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = json.loads(os.read(fd, 4096))
        return Holder(
            pid=int(data["pid"]),
            command=str(data.get("command") or "serve"),
            address=data.get("address"),
            started_at=data.get("started_at"),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return Holder()  # locked, record not written yet (or unreadable)
