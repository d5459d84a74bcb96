"""The composition root of a running server: it opens the store and has everything else wired around
it (`running.py`: the outbound clients and the providers, the conversation service, observability,
the gateway, the background tasks). Nothing else in a server opens the store; another store backend
plugs in at `_open_store`.

`gateway.front` imports this module once the server listens and calls `start`, which opens the store
beside the import of `running` (most of a cold start): the store's file work lets go of the
interpreter lock, and a first start waits on the disk for its schema, which the import hides.
`gateway.serve` drains the gateway and calls `Server.stop`.
"""
from __future__ import annotations

import asyncio
import importlib
import ssl
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from .store import Store, is_postgres_url

if TYPE_CHECKING:
    from .config import Config
    from .running import Server

RUNNING = "cursor_byok.running"


async def _open_store(config: Config) -> Any:
    """The embedded SQLite file in the data dir, or the PostgreSQL database of `[store] url`."""
    return await Store.open(config.store_location)


async def start(config: Config, guard: Any = None, tls: Awaitable[ssl.SSLContext] | None = None) -> Server:
    """Open the store while the rest of the server is imported, then wire and start it; the running
    server. `guard`: the one already in front of the server while it loaded; `tls`: the trust
    store's context, when it is being built beside this (else each start builds its own)."""
    opening = asyncio.ensure_future(_open_store(config))
    if is_postgres_url(config.store_location):
        # Its open imports psycopg on this thread: done before `running` is imported in another, as
        # only one thread may import at a time (see `trust_store.import_modules`).
        await asyncio.wait((opening,))
    try:
        running = await asyncio.to_thread(importlib.import_module, RUNNING)
        context = await tls if tls is not None else None
    except BaseException:
        await _close_once_open(opening)
        raise
    store = await opening
    server: Server = await running.start(config, store, guard, context)
    return server


async def _close_once_open(opening: asyncio.Future[Any]) -> None:
    """The store of a start that failed: closed once open (its own failure is not the one to report)."""
    try:
        store = await opening
    except Exception:  # noqa: BLE001 - the start's failure is raised instead
        return
    await store.close()


__all__ = ["start"]
