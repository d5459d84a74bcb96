"""Where Cursor's traffic goes: Cursor's settings, our proxy, and the corporate proxy beyond it.

`cursor enable` replaces Cursor's `http.proxy`; when that was a corporate proxy, it stays in the
path: our proxy sends every tunnel it does not open on to it, and the server's own outbound requests
go through it too (unless HTTPS_PROXY already says where they go).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..config import Config
from .common import proxy_url

log = logging.getLogger("cursor_byok.cli")

if TYPE_CHECKING:
    from ..cursor_settings import CursorSettings

_LOOPBACK = ("localhost", "127.0.0.1", "::1")


def cursor_settings(cfg: Config, explicit: str | None = None) -> CursorSettings:
    """Cursor's settings.json: the one given, else the one `enable` edited, else the platform default."""
    from ..cursor_settings import BACKUP_FILE_NAME, CursorSettings, default_settings_path, enable_record

    backup = cfg.data_path / BACKUP_FILE_NAME
    if explicit:
        path = Path(explicit).expanduser()
    else:
        record = enable_record(backup)
        path = record.settings_path if record is not None else default_settings_path()
    return CursorSettings(path, backup)


def cursor_uses_our_proxy(cfg: Config) -> bool:
    """`cursor enable` with this data dir pointed Cursor at this config's proxy, and the settings
    file still says so. (Only a standing enable counts: another data dir's server, a test server
    say, must not start a proxy because of the user's own Cursor.)"""
    from ..cursor_settings import BACKUP_FILE_NAME, PROXY_KEY, CursorSettings, SettingsError, enable_record

    backup = cfg.data_path / BACKUP_FILE_NAME
    record = enable_record(backup)
    if record is None:
        return False
    try:
        values = CursorSettings(record.settings_path, backup).status().values
    except SettingsError:
        return False
    return values.get(PROXY_KEY) == proxy_url(cfg)


def corporate_proxy(cfg: Config) -> str | None:
    """The proxy beyond ours: `[proxy] upstream_proxy`, else the http.proxy `cursor enable` replaced
    (never our own proxy: that would be a loop)."""
    from ..cursor_settings import BACKUP_FILE_NAME, enable_record

    if cfg.proxy.upstream_proxy:
        return cfg.proxy.upstream_proxy
    record = enable_record(cfg.data_path / BACKUP_FILE_NAME)
    replaced = record.replaced_proxy if record is not None else None
    if replaced is None or replaced.rstrip("/") == proxy_url(cfg):
        return None
    if "://" not in replaced:  # Cursor (like VS Code) also takes a bare host:port
        replaced = "http://" + replaced
    if urlsplit(replaced).scheme != "http":
        log.warning(
            "Cursor's previous proxy %s is not an http:// proxy and is not chained; "
            "set [proxy] upstream_proxy to an http:// proxy to chain one",
            shown_url(replaced),
        )
        return None
    return replaced


def outbound_proxy_env(corporate: str | None, environ: Mapping[str, str]) -> dict[str, str]:
    """Environment for the server's own requests (providers, Cursor's upstream) to go through the
    corporate proxy, as Cursor's did before `enable`. Nothing when HTTPS_PROXY is set already: the
    user's explicit choice wins. Loopback hosts (local model servers) are never proxied."""
    if not corporate or environ.get("HTTPS_PROXY") or environ.get("https_proxy"):
        return {}
    env = {"HTTPS_PROXY": corporate}
    if not (environ.get("HTTP_PROXY") or environ.get("http_proxy")):
        env["HTTP_PROXY"] = corporate
    no_proxy = environ.get("NO_PROXY") or environ.get("no_proxy") or ""
    env["NO_PROXY"] = ",".join(filter(None, (no_proxy, *_LOOPBACK)))
    return env


def shown_url(url: str) -> str:
    """A proxy URL fit to print: credentials in it are masked."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()


def describe_chain(cfg: Config, corporate: str | None, environ: Mapping[str, str]) -> str:
    """One line: where Cursor's traffic and the server's own requests go."""
    ours = f"Cursor -> {proxy_url(cfg)} (cursor-byok: *.cursor.sh answered locally)"
    beyond = f" -> {shown_url(corporate)} for every other host" if corporate else " -> every other host directly"
    outbound = environ.get("HTTPS_PROXY") or environ.get("https_proxy") or corporate
    server = f"; the server's own requests via {shown_url(outbound)}" if outbound else ""
    return ours + beyond + server


__all__ = [
    "corporate_proxy",
    "cursor_settings",
    "cursor_uses_our_proxy",
    "describe_chain",
    "outbound_proxy_env",
    "shown_url",
]
