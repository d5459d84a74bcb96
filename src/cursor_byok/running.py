"""What a running server is made of: around an open store it builds the outbound clients and the
providers, wires the conversation service, observability and the gateway, supervises the background
tasks, and closes all of it again. The composition root (`server.py`) opens the store beside this
module's import (most of a cold start) and hands it to `start`.
"""
from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import msgspec

from .apis import LocalRpcs, Upstream, effort_for
from .capture import read_active
from .config import Config, ConfigError, ModelConfig, load, resolve_api_key
from .conversation import NO_OBSERVER, ConversationService, Keep, OutputHub, RuntimeServices
from .gateway import Gateway, sweep_seconds
from .http_client import passthrough_client, streaming_client
from .instance import database_problem
from .observability import Dashboard, Metrics, Recorder
from .providers import Provider, ProviderPool
from .run import RunEngine
from .store import keep_retention
from .supervision import Supervisor
from .trust_store import verified

if TYPE_CHECKING:
    from .team import TeamAccess

log = logging.getLogger("cursor_byok.server")  # the name it has always logged under

# Retention (config [retention]) runs a while after start, off the start-up path, then hourly.
RETENTION_FIRST_SECONDS = 60.0
RETENTION_EVERY_SECONDS = 3600.0
INTEGRITY_CHECK_SECONDS = 60.0  # a check not done by then (a huge file on a slow disk) is given up


class Server:
    """Everything one `serve` runs: made by `start`, ended by `stop`."""

    def __init__(self, config: Config, store: Any, guard: Any, tls: ssl.SSLContext) -> None:
        """Wire the parts around an open store (nothing here does I/O; `start` resumes and runs)."""
        self.config = config
        self.store = store
        self.http = passthrough_client(timeout=httpx.Timeout(config.upstream.timeout_seconds, connect=10.0), verify=tls)
        self.provider_http = streaming_client(verify=tls)
        self.providers = ProviderPool(self.provider_http)
        self.providers.track(config.models)
        metrics = Metrics(per_user=config.team.enabled)
        self.recorder = recorder = Recorder(config, store, metrics) if config.observability.enabled else None
        # A team server's developers (config checks keep observability on with it).
        self.team: TeamAccess | None = None
        if config.team.enabled:
            from .team import TeamAccess  # only a team server loads its developers' module

            self.team = TeamAccess(config, store)
        self.services = services = RuntimeServices(
            config=config,
            make_engine=lambda model: RunEngine(self.adapter(model), keep_bodies=config.observability.detailed),
            store=store,
            continuation_window=config.server.continuation_window_seconds,
            blob_ack_timeout=config.server.blob_ack_timeout_seconds,
            recovery_wait=config.server.recovery_wait_seconds,
            reattach_grace=config.server.reattach_grace_seconds,
            serving=False,  # until every journaled stream is resumed: their recovery waits start then
            resolve_effort=effort_for,
            observer=recorder or NO_OBSERVER,
            over_budget=self.team.over_budget if self.team is not None else None,
        )
        upstream = Upstream(
            config.upstream.base_url,
            self.http,
            body_idle_seconds=config.server.body_read_timeout_seconds,
            body_deadline_seconds=config.server.body_deadline_seconds,
        )
        self.gateway = Gateway(
            config,
            guard,
            store=store,
            conversations=ConversationService(services, OutputHub(config.server.output_retention_seconds)),
            upstream=upstream,
            local_rpcs=LocalRpcs(config, upstream),
            metrics=metrics,
        )
        if recorder is not None:
            self.gateway.dashboard = Dashboard(config, store, recorder, self.adapter, self.gateway.gauges)
        if self.team is not None and recorder is not None:
            self.gateway.guard.team = self.team
            recorder.spent = self.team.spent
        self.supervisor = Supervisor()

    def adapter(self, model: ModelConfig) -> Provider:
        return self.providers.adapter(model, resolve_api_key(self.config, model))

    def reload(self) -> None:
        """SIGHUP: take the config file's models (their prices and limits), aliases, secrets file and
        log level, and a team server rereads its developers; the rest of the config needs a restart.
        A file with problems changes nothing: each problem is logged, one line each. Runs already
        going keep the model they started with."""
        if self.team is not None:
            self.team.poke()  # `cursor-byok users` changed the developers
        source = self.config.source
        if not Path(source).is_file():
            log.warning("config not reloaded: the server was started without a config file (%s)", source)
            return
        try:
            fresh = load(source, must_exist=True)
        except ConfigError as exc:
            for problem in exc.problems:
                log.error("config not reloaded: %s", problem)
            return
        observability = msgspec.structs.replace(self.config.observability, log_level=fresh.observability.log_level)
        config = msgspec.structs.replace(
            self.config, models=fresh.models, aliases=fresh.aliases, secrets_file=fresh.secrets_file, observability=observability
        )
        self.config = self.gateway.config = self.services.config = config
        for reader in (self.recorder, self.gateway.dashboard, self.team):
            if reader is not None:
                reader.config = config
        self.gateway.local_rpcs.use_models(config.models)
        self.providers.track(config.models)
        if observability.log_level:
            _use_log_level(observability.log_level)
        log.info("config reloaded", extra={"config": source, "models": len(config.models), "aliases": len(config.aliases)})

    async def stop(self) -> None:
        """Close every resource, each in its own `try`: one that fails to close is logged and the
        rest are closed all the same, so the database is always checkpointed and closed."""
        await self.supervisor.stop()
        await _closing("the conversations", self.gateway.conversations.shutdown("server shutting down"))
        if self.gateway.cluster is not None:  # its leases end now: what was cut here is taken over at once
            await _closing("the cluster membership", self.gateway.cluster.stop())
        await _closing("the upstream client", self.http.aclose())
        await _closing("the provider client", self.provider_http.aclose())
        await _closing(f"the database {self.store.location}", self.store.close())
        if self.gateway.capture is not None:  # the requests have ended (or been cut): write what they left
            await _closing("the capture", asyncio.to_thread(self.gateway.capture.stop, 0.0))

    async def _join_cluster(self) -> Keep | None:
        """On PostgreSQL, several instances may share the database: join them (conversation leases,
        the bus between instances). What a start resumes is then only what no live instance owns:
        the `Keep` that claims each conversation it is asked about. None on the embedded store."""
        if self.config.embedded_store:
            return None
        from .cluster import Cluster, lasting_id
        from .gateway import Peers

        cluster = Cluster(self.config.store.url, self.config.cluster.lease_seconds, lasting_id(self.config.data_path))
        cluster.local = Peers(self.gateway, cluster)
        await cluster.start()
        self.gateway.cluster = cluster
        return cluster.claim_free

    def _run_background(self) -> None:
        gateway, config = self.gateway, self.config
        period = sweep_seconds(config.server)
        self.supervisor.start("sweeper", lambda: _every(period, gateway.sweep))
        self.supervisor.start("provider-warmth", self.providers.keep_warm)
        ages = config.retention_ages_ms()
        self.supervisor.start(
            "retention", lambda: keep_retention(self.store, ages, first_after=RETENTION_FIRST_SECONDS, every=RETENTION_EVERY_SECONDS)
        )
        if config.embedded_store:  # a PostgreSQL server checks its own pages
            self.supervisor.start("integrity-check", self._check_integrity)
        if self.team is not None:
            self.supervisor.start("team-access", self.team.keep_fresh)

    async def _check_integrity(self) -> None:
        """SQLite's quick check of the whole file, once, right after start (in a thread, on its own
        connection, bounded in time): damage is named in one line and by /healthz from then on."""
        problem = await asyncio.to_thread(database_problem, self.config.database_path, within=INTEGRITY_CHECK_SECONDS)
        if problem is not None:
            log.error(problem)
            self.gateway.damage = problem


async def start(config: Config, store: Any, guard: Any = None, tls: ssl.SSLContext | None = None) -> Server:
    """Wire everything around the open `store` (closed here if that fails), resume what the last run
    left and start the background tasks; the running server. `guard`: the one already in front of
    the server while it loaded; `tls`: the trust store's context, if it was built beside the import."""
    try:
        server = Server(config, store, guard, tls or verified())  # every outbound client verifies with this one context
    except BaseException:
        await store.close()
        raise
    try:
        if read_active(config.data_path) is not None:  # off: one failed open, and the recorder is not loaded
            from .capture import sync_capture

            server.gateway.capture = sync_capture(None, config)[0]  # a writer thread starts
        if server.team is not None:
            await server.team.try_refresh()  # before the first request: its developer is known
        keep = await server._join_cluster()
        await server.gateway.conversations.restore(keep)
        await server.gateway.resume_journaled(keep)
        server.services.begin_serving()
        server._run_background()
    except BaseException:
        await server.stop()
        raise
    return server


async def _every(period: float, step: Any) -> None:
    while True:
        await asyncio.sleep(period)
        step()


def _use_log_level(level: str) -> None:
    logging.getLogger().setLevel(level.upper())
    for noisy in ("httpx", "httpcore"):  # as at start: their per-request lines only when debugging
        logging.getLogger(noisy).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)


async def _closing(what: str, closed: Any) -> None:
    try:
        await closed
    except Exception as exc:  # noqa: BLE001 - the next resource is closed all the same
        log.error("closing %s failed: %s", what, exc, exc_info=exc)


__all__ = ["Server", "start"]
