"""What every command shares: the error type, logging set-up, config loading and output helpers."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shlex
import shutil
import sys
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO, TypeVar

import msgspec

from ..config import Config, ConfigError, ModelConfig, load, resolve_api_key, store_url_problem
from ..log_flood import LogFloodFilter

PROG = "cursor-byok"
REQUIRE_COMPILED_ENV = "CURSOR_BYOK_REQUIRE_COMPILED"
GATEWAY_HEALTH_PATH = "/__byok-api__/healthz"
PROXY_HEALTH_PATH = "/__byok-proxy__/healthz"

T = TypeVar("T")


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run`, importing asyncio only here: the commands that need no event loop, `--help`
    and `--version` included, skip its import."""
    import asyncio

    return asyncio.run(coroutine)


class CommandError(Exception):
    """A failed command: one line on stderr, then exit with `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


_STANDARD_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _record_extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_RECORD_FIELDS and not k.startswith("_")}


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, and any `extra=` fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _record_extras(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextLogFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = _record_extras(record)
        if extras:
            line += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        return line


def setup_logging(fmt: str = "text", level: str = "info", stream: TextIO | None = None) -> None:
    """Log lines to stderr, as text for a person or one JSON object each (which carries the ids of
    the run a line was written in: trace_id, conversation_id, run_id, request_id)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        from ..observability import RunIdsFilter

        handler.setFormatter(JsonLogFormatter())
        handler.addFilter(RunIdsFilter())
    else:
        handler.setFormatter(TextLogFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_cursor_byok", False):
            root.removeHandler(old)
    handler.addFilter(LogFloodFilter())  # what an attack can repeat at will: one line per kind and minute
    handler._cursor_byok = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())
    # httpx logs every request at INFO; that is noise on a CLI unless debugging.
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)



def load_config(args: Any, *, must_exist: bool = False) -> Config:
    """The config file's settings, with --store-url over its [store] url."""
    cfg = load(getattr(args, "config", None), must_exist=must_exist)
    store_url = getattr(args, "store_url", None)
    if store_url is not None:
        if problem := store_url_problem(store_url):
            raise ConfigError(f"--store-url: {problem}")
        cfg = msgspec.structs.replace(cfg, store=msgspec.structs.replace(cfg.store, url=store_url))
    return cfg


def installed_command(windows: bool = False) -> list[str]:
    """This installation's `cursor-byok` by absolute path (`python -m cursor_byok.cli` where the
    script is missing)."""
    exe = Path(sys.executable).absolute().with_name("cursor-byok.exe" if windows else "cursor-byok")
    return [str(exe)] if exe.exists() else [str(Path(sys.executable).absolute()), "-m", "cursor_byok.cli"]


def on_path(command: str, environ: Mapping[str, str]) -> bool:
    """Whether `cursor-byok` typed in a shell with this environment runs `command`."""
    found = shutil.which(PROG, path=environ.get("PATH", ""))
    try:
        return found is not None and os.path.samefile(found, command)
    except OSError:
        return False


def typed_command(environ: Mapping[str, str] | None = None) -> str:
    """This installation's command as a user types it: `cursor-byok` when that runs it, else its
    absolute path (a checkout's `.venv/bin/cursor-byok` is on no PATH)."""
    command = installed_command()
    if len(command) == 1 and on_path(command[0], os.environ if environ is None else environ):
        return PROG
    return shlex.join(command)


def connect_host(host: str) -> str:
    """Where a client on this machine reaches a server bound to `host`."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def gateway_url(cfg: Config) -> str:
    scheme = "https" if cfg.server.tls_cert else "http"
    return f"{scheme}://{url_host(connect_host(cfg.server.host))}:{cfg.server.port}"


def proxy_url(cfg: Config, port: int | None = None) -> str:
    return f"http://{url_host(connect_host(cfg.proxy.host))}:{cfg.proxy.port if port is None else port}"


def echo(*parts: object, file: TextIO | None = None) -> None:
    print(*parts, file=file or sys.stdout, flush=True)


class KeyStatus(msgspec.Struct, frozen=True):
    """Whether a model's API key can be read, and where it comes from (never the key itself)."""

    needed: bool
    present: bool
    source: str = ""  # "$NAME" or "secret 'name'"
    problem: str = ""  # why it is missing
    fix: str = ""  # the command or edit that provides it


def key_status(cfg: Config, model: ModelConfig) -> KeyStatus:
    if not (model.api_key_env or model.api_key_secret):
        return KeyStatus(needed=False, present=False)
    source = f"${model.api_key_env}" if model.api_key_env else f"secret {model.api_key_secret!r}"
    try:
        resolve_api_key(cfg, model)
    except ConfigError as exc:
        fix = (
            f"export {model.api_key_env}=<your key> in the shell that runs the server"
            if model.api_key_env
            else f"add {model.api_key_secret} = \"<your key>\" to the secrets file (chmod 600)"
        )
        return KeyStatus(needed=True, present=False, source=source, problem=str(exc), fix=fix)
    return KeyStatus(needed=True, present=True, source=source)


def model_or_fail(cfg: Config, model_id: str) -> ModelConfig:
    model = cfg.model(model_id)
    if model is None:
        known = ", ".join(m.id for m in cfg.models) or "none configured"
        raise CommandError(f"unknown model {model_id!r} (configured: {known})")
    return model



def table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def port_number(text: str) -> int:
    """argparse type for a port option."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"port out of range: {value}")
    return value
