"""What makes one running server the only one: the data dir's lock, the listening socket nobody
shares, and storage faults explained in one line.

    with DataDirLock.acquire(config.data_path) as lock:      # DataDirBusy names the running one
        lock.record(address=display_address(host, port))      # PID, address, start time
        listener = bind_listener(host, port)                  # PortUnavailable: one line
        ...serve on listener...
"""
from __future__ import annotations

from .connections import ConnectionBook, ConnectionWarden, PeerState, WardenLimits, connection_cap, raise_open_file_limit
from .listener import BACKLOG, PortUnavailable, bind_listener, busy_port_advice, display_address, ensure_port_free, port_holder
from .lock import LOCK_FILE_NAME, DataDirBusy, DataDirError, DataDirLock, Holder, lock_holder
from .storage import database_problem, is_damage, storage_problem
from .tls import TlsFiles, TlsFilesError, checked_tls_files

__all__ = [
    "BACKLOG",
    "ConnectionBook",
    "ConnectionWarden",
    "PeerState",
    "WardenLimits",
    "connection_cap",
    "raise_open_file_limit",
    "LOCK_FILE_NAME",
    "DataDirBusy",
    "DataDirError",
    "DataDirLock",
    "Holder",
    "PortUnavailable",
    "bind_listener",
    "busy_port_advice",
    "database_problem",
    "display_address",
    "is_damage",
    "ensure_port_free",
    "lock_holder",
    "port_holder",
    "storage_problem",
    "TlsFiles",
    "TlsFilesError",
    "checked_tls_files",
]
