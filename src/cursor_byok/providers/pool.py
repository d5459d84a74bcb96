"""Provider adapters built once and shared by every run, and warm connections to their providers.

A turn's first model request should not pay for building its adapter (headers, URL, timeouts) or,
worse, for a new TCP and TLS handshake with a remote provider (several round trips: tens to
hundreds of ms). So each provider origin gets a connection in the shared client's keep-alive pool
at start (a HEAD request without credentials: whatever it answers, the connection stays open),
and, while it is in use, again whenever it has been idle for nearly the pool's keep-alive time.
An origin nobody used for `warm_for` seconds is left to go cold: a server idle for hours does not
knock on its providers' doors all day.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

import msgspec

from ..config import ModelConfig
from ..http_client import KEEPALIVE_SECONDS, HttpError, ProviderHttp
from .factory import make_provider
from .transport import HttpStreamProvider

log = logging.getLogger("cursor_byok.providers")

_PROBE_TIMEOUT = 10.0


class _Origin(msgspec.Struct):
    url: str  # an endpoint on it, for the probe
    last_used: float  # a run took an adapter for it (or the server started)
    last_warmed: float = float("-inf")


class ProviderPool:
    """`adapter(model, key)` for every run; `track(models)` and `keep_warm()` keep their origins warm."""

    def __init__(
        self,
        client: ProviderHttp,
        *,
        rewarm_after: float = KEEPALIVE_SECONDS * 0.8,
        warm_for: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._rewarm_after = rewarm_after
        self._warm_for = warm_for
        self._clock = clock
        self._adapters: dict[tuple[str, str], tuple[HttpStreamProvider, str]] = {}  # → (adapter, its origin)
        self._origins: dict[str, _Origin] = {}

    def adapter(self, model: ModelConfig, api_key: str) -> HttpStreamProvider:
        """The adapter for `model` with `api_key`, built on first use (a key that changes, e.g. in
        the secrets file, gets a new one)."""
        key = (model.id, api_key)
        entry = self._adapters.get(key)
        if entry is None or entry[0].model is not model:
            adapter = make_provider(model, api_key, self._client)
            entry = self._adapters[key] = (adapter, _origin_of(adapter.url))
        adapter, origin_url = entry
        origin = self._origins.get(origin_url)
        if origin is not None:
            origin.last_used = self._clock()
        return adapter

    def track(self, models: Iterable[ModelConfig]) -> None:
        """Keep the providers of `models` warm from now on (each is due for a warm-up at once)."""
        now = self._clock()
        for model in models:
            url = make_provider(model, "", self._client).url
            self._origins.setdefault(_origin_of(url), _Origin(url, now))

    async def warm_due(self) -> int:
        """Warm every origin that is due now; how many that were."""
        now = self._clock()
        due = [o for o in self._origins.values() if self._due(o, now)]
        for origin in due:
            origin.last_warmed = now
        await asyncio.gather(*(self._warm(o.url) for o in due))
        return len(due)

    async def keep_warm(self) -> None:
        """Warm what is due, now and every few seconds, until cancelled (a background task)."""
        while True:
            await self.warm_due()
            await asyncio.sleep(min(5.0, self._rewarm_after / 2))

    def _due(self, origin: _Origin, now: float) -> bool:
        if origin.last_warmed == float("-inf"):
            return True  # at start
        idle = now - max(origin.last_used, origin.last_warmed)
        return idle >= self._rewarm_after and now - origin.last_used <= self._warm_for

    async def _warm(self, url: str) -> None:
        try:
            async with asyncio.timeout(_PROBE_TIMEOUT):
                status = await self._client.probe(url, connect_timeout=_PROBE_TIMEOUT)
        except (HttpError, OSError, TimeoutError) as exc:
            log.debug("could not open a connection to %s: %s", _origin_of(url), exc)
            return
        log.debug("connection to %s is warm (HEAD answered %d)", _origin_of(url), status)


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
