"""`cursor-byok cursor enable|disable|status`: point the Cursor IDE's settings.json at the proxy."""
from __future__ import annotations

import argparse
import json
import sys

from .. import local_trust
from ..config import Config, config_path, enable_proxy_in_file
from .chain import corporate_proxy, cursor_settings, shown_url
from .common import CommandError, echo, load_config, proxy_url

PROXY_USER = "cursor-byok"


def cursor_proxy_url(cfg: Config) -> str:
    """The `http.proxy` value for Cursor: our proxy, with the server's auth token as the proxy
    password when one is required (the proxy answers 407 without it)."""
    url = proxy_url(cfg)
    token = local_trust.auth_token(cfg)
    return url.replace("http://", f"http://{PROXY_USER}:{token}@", 1) if token else url


def cmd_cursor_enable(args: argparse.Namespace) -> int:
    from ..cursor_settings import SettingsError
    from ..interceptor import CAState, ca_trust_state

    cfg = load_config(args)
    trust = ca_trust_state(cfg.data_path)
    if trust.state in (CAState.MISSING, CAState.INVALID) and not args.force:
        raise CommandError(
            f"local CA is {trust.state.value}: run `cursor-byok ca init` and `cursor-byok ca install` first "
            "(or pass --force)"
        )
    if trust.state is CAState.UNTRUSTED:
        echo(f"warning: the local CA is not trusted yet: {trust.detail}", file=sys.stderr)
    url = args.proxy_url or cursor_proxy_url(cfg)
    # Never point Cursor at a port nothing will serve: our proxy must be on in the config first
    # (a ConfigError here says how to do it by hand).
    turned_on = url == cursor_proxy_url(cfg) and enable_proxy_in_file(config_path(args.config))
    settings = cursor_settings(cfg, args.settings)
    try:
        changed = settings.enable(url, proxy_support=args.proxy_support, create_user_dir=args.force, http2=args.http2)
    except SettingsError as exc:
        raise CommandError(str(exc)) from None
    echo(f"enabled: {settings.path} now points Cursor at {shown_url(url)}")
    echo(f"transport: {'HTTP/2 (the agent runs as one Run stream)' if args.http2 else 'HTTP/1.1 (cursor.general.disableHttp2 = true)'}")
    echo(f"changed: {', '.join(changed) if changed else 'nothing (already set)'}")
    if turned_on:
        echo(f"proxy: turned on in {config_path(args.config)} ([proxy] enabled = true)")
    corporate = corporate_proxy(cfg)
    if corporate:
        echo(f"chain: hosts other than *.cursor.sh go on through {shown_url(corporate)}, as before")
    echo("next: (re)start `cursor-byok serve` (it runs the proxy now), then quit Cursor completely and start it again")
    return 0


def cmd_cursor_disable(args: argparse.Namespace) -> int:
    from ..cursor_settings import SettingsError

    cfg = load_config(args)
    settings = cursor_settings(cfg, args.settings)
    try:
        touched = settings.disable(force=args.force)
    except SettingsError as exc:
        raise CommandError(str(exc)) from None
    if touched:
        echo(f"disabled: restored {', '.join(touched)} in {settings.path}")
        echo("next: quit Cursor completely and start it again")
    else:
        echo(f"nothing to undo in {settings.path}")
    return 0


def cmd_cursor_status(args: argparse.Namespace) -> int:
    from ..cursor_settings import MANAGED_KEYS, SettingsError

    cfg = load_config(args)
    settings = cursor_settings(cfg, args.settings)
    url = args.proxy_url or cursor_proxy_url(cfg)
    try:
        status = settings.status(url)
    except SettingsError as exc:
        raise CommandError(str(exc)) from None
    echo(f"settings: {status.path}{'' if status.exists else ' (does not exist)'}")
    echo(f"state: {status.state.value} (expected proxy {shown_url(url)})")
    echo(f"transport: {'HTTP/2 (Run)' if status.http2 else 'HTTP/1.1 (RunSSE + BidiAppend)'}")
    for key in MANAGED_KEYS:
        value = status.values.get(key)
        if isinstance(value, str):
            value = shown_url(value)  # a proxy URL may carry the token
        echo(f"  {key}: {'(unset)' if key not in status.values else json.dumps(value)}")
    echo(f"backup: {'present' if status.backup_present else 'none'} ({settings.backup_path})")
    for warning in status.warnings:
        echo(f"warning: {warning}")
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    cursor = sub.add_parser("cursor", help="point the Cursor IDE at the proxy (settings.json)")
    cursor_sub = cursor.add_subparsers(dest="cursor_command", metavar="ACTION", required=True)
    for name, handler, text in (
        ("enable", cmd_cursor_enable, "set Cursor's proxy keys (your previous values are saved)"),
        ("disable", cmd_cursor_disable, "restore Cursor's previous settings exactly"),
        ("status", cmd_cursor_status, "show what Cursor's settings say"),
    ):
        p = cursor_sub.add_parser(name, parents=[common], help=text)
        p.add_argument("--settings", metavar="PATH", help="Cursor's User/settings.json (default: per platform)")
        if name != "disable":
            p.add_argument("--proxy-url", metavar="URL", help="default: http://<proxy.host>:<proxy.port> from the config")
        if name == "enable":
            p.add_argument("--proxy-support", choices=("override", "on"), default="override", help="Cursor's http.proxySupport: override (all requests use the proxy; default) or on")
            p.add_argument("--force", action="store_true", help="enable even without a local CA, or where Cursor's user dir does not exist")
            p.add_argument("--http2", action="store_true", help="leave Cursor on HTTP/2 (its agent then uses the Run stream) instead of setting disableHttp2")
        if name == "disable":
            p.add_argument("--force", action="store_true", help="restore the saved values even over ones changed since `enable`")
        p.set_defaults(handler=handler)
