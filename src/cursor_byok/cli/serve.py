"""`cursor-byok serve`: the server, and the intercepting proxy beside it when enabled."""
from __future__ import annotations

import argparse
import errno
import gc
import importlib
import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from .. import local_trust
from ..config import Config, ConfigError, config_path
from ..datadir import secure_data_dir, use_private_umask
from ..instance import (
    DataDirBusy,
    DataDirError,
    DataDirLock,
    PortUnavailable,
    TlsFilesError,
    bind_listener,
    busy_port_advice,
    checked_tls_files,
    connection_cap,
    display_address,
    ensure_port_free,
    lock_holder,
)
from ..trust_store import TrustStoreError
from . import startup
from .chain import corporate_proxy
from .common import CommandError, gateway_url, load_config, port_number, proxy_url, setup_logging
from .first_run import warn_if_no_models

if TYPE_CHECKING:
    from ..interceptor import ProxyThread

log = logging.getLogger("cursor_byok.cli")

SERVER_ROOT = "cursor_byok.server"  # the composition root: imported once the server listens, behind the health probe


def cmd_serve(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    obs = cfg.observability
    if (args.log_format is None and obs.log_format == "json") or (args.log_level is None and obs.log_level):
        # the config's format and level; --log-format and --log-level would have won
        setup_logging(args.log_format or obs.log_format, args.log_level or obs.log_level or "info")
    server = cfg.server
    if args.host is not None:
        server = msgspec.structs.replace(server, host=args.host)
    if args.port is not None:
        server = msgspec.structs.replace(server, port=args.port)
    if args.data_dir is not None:
        server = msgspec.structs.replace(server, data_dir=str(Path(args.data_dir).expanduser().absolute()))
    if args.tls_cert is not None or args.tls_key is not None:
        server = msgspec.structs.replace(server, tls_cert=args.tls_cert or server.tls_cert, tls_key=args.tls_key or server.tls_key)
    proxy_cfg = cfg.proxy
    if args.proxy is not None:
        proxy_cfg = msgspec.structs.replace(proxy_cfg, enabled=args.proxy)
    if args.proxy_port is not None:
        proxy_cfg = msgspec.structs.replace(proxy_cfg, port=args.proxy_port)
    cfg = msgspec.structs.replace(cfg, server=server, proxy=proxy_cfg)
    if not 0 < cfg.server.port < 65536:
        raise ConfigError(f"{cfg.source}: server.port: must be between 1 and 65535")
    proxy_asked = cfg.proxy.enabled  # by the flag or the config, not because Cursor points at it
    cfg = startup.prepare(cfg, args.proxy)
    refuse_unusable_relay_proxy(cfg)

    local_trust.auth_token(cfg)  # a missing auth_token_env variable: one line now, not a failed start later
    if bool(cfg.server.tls_cert) != bool(cfg.server.tls_key):  # the flags gave one of them
        raise CommandError("--tls-cert and --tls-key go together (TLS needs the certificate and its key)")
    try:
        checked_tls_files(cfg.server.tls_cert, cfg.server.tls_key)  # one line now, not a half-started server
    except TlsFilesError as exc:
        raise CommandError(str(exc)) from None
    if cfg.server.tls_cert and cfg.proxy.enabled:
        if proxy_asked:
            raise CommandError(
                "the intercepting proxy runs beside a local server, not a TLS-serving team server: "
                "drop --proxy ([proxy] enabled) here; developers run `cursor-byok connect URL`"
            )
        cfg = msgspec.structs.replace(cfg, proxy=msgspec.structs.replace(cfg.proxy, enabled=False))
    use_private_umask()  # before anything creates a file: the data dir, its lock, the database
    try:
        # Nothing is created before the start is known to work: first whether another server holds
        # the data dir (named as such), then both ports, and only then the data dir and its CA.
        try:
            holder = lock_holder(cfg.data_path)
        except OSError:  # unreadable: the lock's own acquire below says what is wrong with it
            holder = None
        if holder is not None:
            raise DataDirBusy(cfg.data_path, holder)
        listener = bind_listener(cfg.server.host, cfg.server.port)
        try:
            if cfg.proxy.enabled:
                ensure_port_free(cfg.proxy.host, cfg.proxy.port, "proxy")
            lock = DataDirLock.acquire(cfg.data_path)
        except BaseException:
            listener.close()
            raise
        with lock:
            lock.record(address=display_address(cfg.server.host, cfg.server.port))
            secure_data_dir(cfg.data_path)  # ours now: tighten what an earlier run left open
            return _serve(cfg, listener, config_path(getattr(args, "config", None)))  # owns the listener
    except (DataDirError, PortUnavailable, TrustStoreError) as exc:
        raise CommandError(str(exc)) from None


def refuse_unusable_relay_proxy(cfg: Config) -> None:
    """A proxy in the environment that Cursor's Run stream relay cannot use: one line now, rather
    than a relay that goes direct (or fails) on a network that only lets traffic out through it."""
    from ..proxy_env import any_proxy

    if not any_proxy():
        return  # nothing to check, and no URL parser to import before the server listens
    import httpx

    from ..apis import UnusableProxy, relay_proxy

    try:
        relay_proxy(httpx.URL(cfg.upstream.base_url))
    except UnusableProxy as exc:
        raise CommandError(str(exc)) from None


def _serve(cfg: Config, listener: socket.socket, config_file: Path) -> int:
    """The gateway in this process (it owns the listener from here), the proxy in a thread beside
    it; both end with this process, however it ends."""
    # Start-up makes objects that live as long as the process (modules, classes, the app): the
    # collector would only walk them over and over (~130 passes while importing). It is back on,
    # with all of those frozen out of its way, once the gateway is up (`gateway.serve`).
    gc.disable()
    try:
        gateway = importlib.import_module("cursor_byok.gateway")  # heavy: only `serve` needs it
        proxy_thread = start_proxy(cfg) if cfg.proxy.enabled else None
    except BaseException:
        gc.enable()
        listener.close()
        raise
    startup.print_summary(cfg)
    warn_if_no_models(cfg, config_file)
    try:
        return int(gateway.serve(cfg, listener, SERVER_ROOT) or 0)
    finally:
        gc.enable()  # on already, unless start-up failed
        if proxy_thread is not None:
            proxy_thread.stop()
            log.info("proxy stopped")


def start_proxy(cfg: Config, gateway: str | None = None, gateway_headers: list[tuple[str, str]] | None = None, **options: Any) -> ProxyThread:
    """The intercepting proxy in its thread, sending what it intercepts to `gateway` (default: this
    config's server, with our mark and token); `options` go to InterceptingProxy (a team's routes)."""
    from ..interceptor import (
        CAError,
        CAState,
        InterceptingProxy,
        LocalCA,
        ProxyLimits,
        ProxyThread,
        ca_trust_state,
    )

    try:
        ca, created = LocalCA.load_or_create(cfg.data_path)
    except CAError as exc:
        raise CommandError(str(exc)) from None
    if created:
        log.warning(
            "created a local CA; trust it once with `cursor-byok ca install`",
            extra={"ca_cert": str(ca.paths.cert), "fingerprint": ca.fingerprint},
        )
    else:
        trust = ca_trust_state(cfg.data_path)
        if trust.state is not CAState.TRUSTED:
            log.warning("local CA is %s: %s", trust.state.value, trust.detail)
    proxy = InterceptingProxy(
        ca,
        gateway or gateway_url(cfg),
        cfg.proxy.host,
        cfg.proxy.port,
        limits=ProxyLimits(
            first_byte_seconds=cfg.server.first_byte_timeout_seconds,
            head_seconds=cfg.server.header_read_timeout_seconds,
            body_seconds=cfg.server.body_deadline_seconds,
            max_connections=connection_cap(cfg.server.max_connections),
        ),
        upstream_proxy=corporate_proxy(cfg),
        gateway_headers=local_trust.proxy_headers(cfg) if gateway_headers is None else gateway_headers,
        client_token=local_trust.auth_token(cfg),
        **options,
    )
    thread = ProxyThread(proxy)
    try:
        port = thread.start()
    except OSError as exc:  # taken since the check before start-up
        why = busy_port_advice(cfg.proxy.port, "proxy") if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
        raise CommandError(f"proxy cannot listen on {display_address(cfg.proxy.host, cfg.proxy.port)}: {why}") from None
    log.info("proxy listening", extra={"proxy_url": proxy_url(cfg, port), "gateway": gateway or gateway_url(cfg)})
    return thread


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("serve", parents=[common], help="run the server (and optionally the proxy for the IDE)")
    p.add_argument("--host", help="address to listen on (default: [server] host, 127.0.0.1)")
    p.add_argument("--port", type=port_number, help="port to listen on (default: [server] port, 8787)")
    p.add_argument("--data-dir", metavar="DIR", help="where the database, the local CA and the lock live (default: [server] data_dir, the user data dir)")
    p.add_argument("--proxy", action=argparse.BooleanOptionalAction, default=None, help="also run the intercepting proxy the IDE uses (default: [proxy] enabled)")
    p.add_argument("--proxy-port", type=port_number, metavar="N", help="port of the intercepting proxy (default: [proxy] port, 8788)")
    p.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate (chain) file (default: [server] tls_cert)")
    p.add_argument("--tls-key", metavar="PEM", help="the certificate's private key file (default: [server] tls_key)")
    p.set_defaults(handler=cmd_serve)
