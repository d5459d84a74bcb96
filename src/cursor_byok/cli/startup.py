"""What `serve` decides and says before it serves: start the proxy when Cursor is pointed at it,
send the server's own requests through the corporate proxy
Cursor used before, and a start summary a new user can act on."""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping

import msgspec

from .. import __version__
from ..capture import captures_dir, read_active
from ..config import Config, ProviderKind
from .chain import corporate_proxy, cursor_uses_our_proxy, outbound_proxy_env, shown_url
from .common import PROG, echo, gateway_url, installed_command, key_status, proxy_url, typed_command

log = logging.getLogger("cursor_byok.cli")


def prepare(cfg: Config, proxy_flag: bool | None, environ: MutableMapping[str, str] | None = None) -> Config:
    """The config to serve with (proxy on when Cursor uses it and no flag said otherwise); adds the
    outbound proxy to `environ` (default: this process's environment, which the server's outbound
    clients read). The port is refused later, by the bind itself, after the data-dir lock."""
    environ = os.environ if environ is None else environ
    if proxy_flag is None and not cfg.proxy.enabled and cursor_uses_our_proxy(cfg):
        log.info("Cursor's settings point at the proxy: starting it too")
        cfg = msgspec.structs.replace(cfg, proxy=msgspec.structs.replace(cfg.proxy, enabled=True))
    environ.update(outbound_proxy_env(corporate_proxy(cfg), environ))
    return cfg


def summary(cfg: Config, environ: Mapping[str, str] | None = None) -> list[str]:
    """The start summary: address, data dir, models and keys, proxy, upstream, what to do next."""
    environ = os.environ if environ is None else environ
    url = gateway_url(cfg)
    me = typed_command(environ)
    if me == PROG:
        where = f"  command: {PROG} (on PATH: {installed_command()[0]})"
    else:
        where = f"  command: {me} (not on PATH: `make install` in the source checkout puts it there)"
    lines = [
        f"{PROG} {__version__} serving on {url}",
        f"  dashboard: {url}/ui/  metrics: {url}/metrics",
        where,
        f"  data dir: {cfg.data_path}",
    ]
    missing = []
    for model in cfg.models:
        key = key_status(cfg, model)
        if not key.needed:
            state = "no key needed"
        elif key.present:
            state = f"key {key.source} present"
        else:
            state = f"key MISSING ({key.fix})"
            missing.append(model.id)
        where = f" at {model.base_url}" if model.base_url else ""
        lines.append(f"  model {model.id}: {ProviderKind(model.provider).value} {model.model}{where}, {state}")
    if not cfg.models:
        lines.append("  models: none configured (Cursor will only see its own; add [[models]] to the config)")
    corporate = corporate_proxy(cfg)
    if cfg.proxy.enabled:
        beyond = f"; other hosts via {shown_url(corporate)}" if corporate else ""
        lines.append(f"  proxy: on at {proxy_url(cfg)} (intercepts *.cursor.sh only{beyond})")
    else:
        lines.append(f"  proxy: off (Cursor's agent reaches this server only through it: `{me} serve --proxy`)")
    outbound = environ.get("HTTPS_PROXY") or environ.get("https_proxy")
    lines.append(f"  upstream: {cfg.upstream.base_url}" + (f" via {shown_url(outbound)}" if outbound else ""))
    capture = read_active(cfg.data_path)
    if capture is not None:
        what = "WITH CONTENT" if capture.with_content else "redacted"
        lines.append(f"  capture: ON ({what}) to {captures_dir(cfg.data_path) / capture.session}; `cursor-byok capture stop` ends it")
    if missing:
        next_step = f"set the missing key{'s' * (len(missing) > 1)} (above) and restart; then `{me} doctor`"
    elif cfg.proxy.enabled and cursor_uses_our_proxy(cfg):
        next_step = f"`{me} doctor` checks the whole chain; restart Cursor fully to pick your models"
    else:
        next_step = f"`{me} doctor`, then `{me} cursor enable` to point Cursor at the proxy"
    lines.append(f"  next: {next_step}")
    return lines


def print_summary(cfg: Config) -> None:
    for line in summary(cfg):
        echo(line)


__all__ = ["prepare", "print_summary", "summary"]
