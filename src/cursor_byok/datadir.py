"""The data dir is private: it holds every conversation (code, prompts, tool output) and the CA key.

The server process runs with umask 077, so everything it creates (the database and its WAL/SHM
files, logs, journals, exports) is 0600 and every folder 0700. What an older version or another
tool left readable by others is tightened at start where we own it; what we do not own is
reported with the `chmod` to run (`doctor` shows the same lines).
"""
from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import msgspec

log = logging.getLogger("cursor_byok.datadir")

SERVER_UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600
# Certificates are public by design (the CA certificate gets copied into the system trust store).
PUBLIC_SUFFIXES = (".crt",)


class OpenEntry(msgspec.Struct, frozen=True):
    """A file or folder in the data dir that users other than its owner can reach."""

    path: Path
    mode: int
    is_dir: bool
    ours: bool

    @property
    def fix(self) -> str:
        return f"chmod {'700' if self.is_dir else '600'} {self.path}"

    def describe(self) -> str:
        return f"{self.path} is {stat.filemode(self.mode)} (readable by other users): run `{self.fix}`"


def open_entries(path: Path) -> list[OpenEntry]:
    """Everything under `path` (itself included) with group or other permission bits."""
    if os.name != "posix" or not path.is_dir():
        return []
    uid = os.getuid()
    found = []
    pending = [path]
    while pending:
        current = pending.pop()
        try:
            st = current.lstat()
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            continue
        is_dir = stat.S_ISDIR(st.st_mode)
        if st.st_mode & 0o077 and (is_dir or not current.name.endswith(PUBLIC_SUFFIXES)):
            found.append(OpenEntry(current, st.st_mode, is_dir, st.st_uid == uid))
        if is_dir:
            try:
                pending.extend(current.iterdir())
            except OSError:
                continue
    return found


def use_private_umask() -> None:
    """From here on this process creates private files (the data dir, the lock, the database)."""
    if os.name == "posix":
        os.umask(SERVER_UMASK)


def secure_data_dir(path: Path) -> list[OpenEntry]:
    """Make this process create private files, create the data dir 0700 and tighten what we own
    in it. Returns what stays open (owned by someone else), each already logged as a warning."""
    if os.name != "posix":
        path.mkdir(parents=True, exist_ok=True)
        return []
    use_private_umask()
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    left = []
    for entry in open_entries(path):
        if not entry.ours:
            left.append(entry)
            log.warning("data dir entry is readable by other users", extra={"path": str(entry.path), "fix": entry.fix})
            continue
        os.chmod(entry.path, DIR_MODE if entry.is_dir else stat.S_IMODE(entry.mode) & ~0o077)
        log.info("tightened permissions in the data dir", extra={"path": str(entry.path)})
    return left
