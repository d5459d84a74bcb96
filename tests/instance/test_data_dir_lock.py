"""The data dir lock: one holder, named to whoever else asks, released however the holder ends."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cursor_byok.instance import DataDirBusy, DataDirError, DataDirLock, lock_holder


def test_a_second_acquire_is_refused_naming_the_holder(tmp_path: Path) -> None:
    with DataDirLock.acquire(tmp_path / "data") as lock:
        with pytest.raises(DataDirBusy, match="starting up"):
            DataDirLock.acquire(tmp_path / "data", patience=0)
        lock.record(address="127.0.0.1:8787")
        with pytest.raises(DataDirBusy) as refused:
            DataDirLock.acquire(tmp_path / "data", patience=0.05)
        message = str(refused.value)
        assert f"PID {os.getpid()}" in message and "listening on 127.0.0.1:8787" in message and "--data-dir" in message
        holder = lock_holder(tmp_path / "data")
        assert holder is not None and holder.pid == os.getpid() and holder.address == "127.0.0.1:8787"
    assert lock_holder(tmp_path / "data") is None
    DataDirLock.acquire(tmp_path / "data", patience=0).release()


def test_the_kernel_releases_the_lock_of_a_killed_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from pathlib import Path
            from cursor_byok.instance import DataDirLock
            DataDirLock.acquire(Path({str(tmp_path)!r})).record(address="127.0.0.1:1")
            print("held", flush=True)
            time.sleep(60)
        """)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert getattr(lock_holder(tmp_path), "pid", None) == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    assert lock_holder(tmp_path) is None  # the record is still there; nobody holds it
    with DataDirLock.acquire(tmp_path, patience=0):
        pass


def test_a_data_dir_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(DataDirError, match=r"cannot use data dir .*: Not a directory: make it writable"):
        DataDirLock.acquire(tmp_path / "file" / "data")
