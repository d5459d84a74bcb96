"""`cursor-byok connect URL`: a developer's machine in front of a team server. Only the local
interceptor runs: the agent RPCs of the team's models go to the team server with the developer's
token, everything else to Cursor as before (`interceptor/team.py`)."""
from __future__ import annotations

import argparse
import logging
import os
import queue
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import DEFAULT_UPSTREAM, Config
from ..datadir import use_private_umask
from .chain import cursor_settings
from .common import CommandError, echo, load_config, port_number, proxy_url
from .team_link import (
    TOKEN_ENV,
    TeamLink,
    TeamProblem,
    TeamUnreachable,
    normalized_url,
    read_link,
    save_link,
    team_client,
    team_models,
)

if TYPE_CHECKING:
    from ..interceptor import TeamRoutes, TeamServer

log = logging.getLogger("cursor_byok.cli")

REFRESH_SECONDS = 300.0  # how often the team's models are read again (SIGHUP: at once)
RETRY_SECONDS = 30.0  # as long as none could be read


def _token(args: argparse.Namespace) -> str:
    """The token from --token-file, $CURSOR_BYOK_TEAM_TOKEN or --token ('' when none is given)."""
    if args.token_file:
        try:
            return Path(args.token_file).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CommandError(f"--token-file {args.token_file}: {exc.strerror or exc}") from None
    return os.environ.get(TOKEN_ENV, "").strip() or (args.token or "").strip()


def _link(cfg: Config, args: argparse.Namespace) -> TeamLink:
    saved = read_link(cfg.data_path)
    try:
        url = normalized_url(args.url) if args.url else saved.url if saved else ""
    except TeamProblem as exc:
        raise CommandError(str(exc)) from None
    if not url:
        raise CommandError("name the team server: cursor-byok connect https://team.example --token-file FILE")
    token = _token(args) or (saved.token if saved is not None and saved.url == url else "")
    if not token:
        raise CommandError(f"give your developer token: --token-file FILE or ${TOKEN_ENV} (kept in the data dir for the next time)")
    return TeamLink(url, token)


def _team_server(link: TeamLink) -> TeamServer:
    """What the interceptor needs of the team server: its models and its entries of Cursor's model
    lists. TeamProblem when it cannot be had."""
    import httpx

    from ..interceptor import MODEL_LIST_PATHS, TeamServer, own_entries

    with team_client() as client:
        ids = team_models(client, link)
        listed: dict[str, bytes] = {}
        for path in sorted(MODEL_LIST_PATHS):
            try:
                answer = client.post(link.url + path, content=b"", headers={**link.headers(), "content-type": "application/proto"})
            except httpx.HTTPError as exc:
                raise TeamUnreachable(f"team server {link.url}: {path} failed: {exc.__class__.__name__}") from None
            if answer.is_success:
                listed[path] = own_entries(path, answer.content, ids)
    return TeamServer(link.url, link.token, frozenset(ids), listed)


def _no_models(link: TeamLink) -> TeamServer:
    from ..interceptor import TeamServer

    return TeamServer(link.url, link.token, frozenset())


def _warn_if_cursor_uses_http2(cfg: Config) -> None:
    """In front of a team server the proxy speaks HTTP/1.1 alone (routes are decided per request):
    Cursor left on HTTP/2 by `cursor enable --http2` runs its agent as Run streams it cannot route."""
    from ..cursor_settings import SettingsError

    try:
        status = cursor_settings(cfg).status(proxy_url(cfg))
    except SettingsError:
        return
    if status.exists and status.http2:
        log.warning("Cursor is set to HTTP/2; in front of a team server run `cursor-byok cursor enable` (without --http2) and restart Cursor")


def cmd_connect(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    if args.proxy_port is not None:
        import msgspec

        cfg = msgspec.structs.replace(cfg, proxy=msgspec.structs.replace(cfg.proxy, port=args.proxy_port))
    use_private_umask()
    link = _link(cfg, args)
    try:
        team = _team_server(link)
    except TeamUnreachable as exc:
        if read_link(cfg.data_path) != link:  # a new server or token: said now, not found out later
            raise CommandError(str(exc)) from None
        # The one it served before: Cursor keeps working meanwhile (the team's models go to Cursor).
        log.warning("%s: the team's models go to Cursor until it answers (asked again every %g s)", exc, RETRY_SECONDS)
        team = _no_models(link)
    except TeamProblem as exc:
        raise CommandError(str(exc)) from None
    else:
        save_link(cfg.data_path, link)  # accepted by the team server: kept for the next start and for doctor

    from .. import local_trust, trust_store
    from ..interceptor import TeamRoutes
    from .serve import start_proxy

    custom_upstream = cfg.upstream.base_url.rstrip("/") != DEFAULT_UPSTREAM
    routes = TeamRoutes(team, cfg.server.runsse_wait_seconds)
    thread = start_proxy(
        cfg,
        link.url,
        [(local_trust.AUTH_TOKEN_HEADER, link.token)],
        team=routes,
        gateway_tls=trust_store.verified(),
        cursor_base_url=cfg.upstream.base_url if custom_upstream else None,
    )
    models = ", ".join(sorted(team.model_ids)[:12]) or "none yet: it does not answer"
    echo(f"connected to the team server {link.url} (models: {models})")
    echo(f"  proxy: {proxy_url(cfg)} (the agent of the team's models goes to the team server; the rest to Cursor)")
    echo("  next: `cursor-byok cursor enable` once, then restart Cursor fully; Ctrl-C stops, SIGHUP reads the team's models again")
    _warn_if_cursor_uses_http2(cfg)
    try:
        _serve_until_stopped(routes, link)
    finally:
        thread.stop()
        log.info("proxy stopped")
    return 0


def _serve_until_stopped(routes: TeamRoutes, link: TeamLink) -> None:
    """Until SIGINT/SIGTERM: the team's models are read again every REFRESH_SECONDS (RETRY_SECONDS
    while none could be read yet) and on SIGHUP: a model the operator added is routed to the team
    from then on; a failed read keeps the list."""
    # Signal handlers only put a word on a SimpleQueue (reentrant, made for that): an Event's
    # lock taken in a handler could be the one this thread holds at that moment.
    signals: queue.SimpleQueue[str] = queue.SimpleQueue()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: signals.put("stop"))
    if hasattr(signal, "SIGHUP"):  # pragma: no branch - Windows has none
        signal.signal(signal.SIGHUP, lambda *_: signals.put("reload"))
    while True:
        try:
            if signals.get(timeout=REFRESH_SECONDS if routes.team.model_ids else RETRY_SECONDS) == "stop":
                return
        except queue.Empty:
            pass  # time to read them again
        try:
            routes.team = _team_server(link)  # one reference swapped: the proxy's thread reads either whole
        except TeamProblem as exc:
            log.warning("the team's models were not read again: %s", exc)
            continue
        log.info("the team's models read", extra={"models": sorted(routes.team.model_ids)})


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("connect", parents=[common], help="use a team server: run only the proxy, the team's models on the team server")
    p.add_argument("url", nargs="?", help="the team server, e.g. https://team.example (default: the one connected to last)")
    p.add_argument("--token-file", metavar="FILE", help="a file holding your developer token (or set $" + TOKEN_ENV + ")")
    p.add_argument("--token", help="your developer token (other local users see it in the process list: prefer --token-file)")
    p.add_argument("--proxy-port", type=port_number, metavar="N", help="port of the intercepting proxy (default: [proxy] port, 8788)")
    p.set_defaults(handler=cmd_connect)
