"""`cursor-byok`: run the server, check the setup, and wire the Cursor IDE to it.

    cursor-byok serve [--config PATH] [--host H] [--port P] [--data-dir DIR] [--proxy|--no-proxy]
    cursor-byok doctor [--check-providers]
    cursor-byok config path|validate
    cursor-byok models list|test MODEL_ID
    cursor-byok conversations list|show ID|export ID
    cursor-byok cursor enable|disable|status
    cursor-byok ca init|show|install

A bad config is one line on stderr (`cursor-byok: <path>: <key>: <problem>`) and exit status 2.
Heavy subsystems (gateway, providers, store) are imported inside the commands that need them.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import enum
import importlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import msgspec

from . import __version__
from .config import (
    CONFIG_ENV,
    Config,
    ConfigError,
    ModelConfig,
    ProviderKind,
    config_path,
    load,
    resolve_api_key,
)

if TYPE_CHECKING:
    from .cursor_settings import CursorSettings
    from .interceptor import ProxyThread

PROG = "cursor-byok"
REQUIRE_COMPILED_ENV = "CURSOR_BYOK_REQUIRE_COMPILED"
GATEWAY_HEALTH_PATH = "/__byok-api__/healthz"
PROXY_HEALTH_PATH = "/__byok-proxy__/healthz"
PROVIDER_CHECK_TIMEOUT = 5.0
_DEFAULT_BASE_URLS = {
    ProviderKind.OPENAI_CHAT: "https://api.openai.com/v1",
    ProviderKind.OPENAI_RESPONSES: "https://api.openai.com/v1",
    ProviderKind.ANTHROPIC: "https://api.anthropic.com",
}

log = logging.getLogger("cursor_byok.cli")


class CommandError(Exception):
    """A failed command: one line on stderr, then exit with `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# ---- logging ---------------------------------------------------------------------------------

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
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLogFormatter() if fmt == "json" else TextLogFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_cursor_byok", False):
            root.removeHandler(old)
    handler._cursor_byok = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())
    # httpx logs every request at INFO; that is noise on a CLI unless debugging.
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)


# ---- shared helpers --------------------------------------------------------------------------


def _load_config(args: argparse.Namespace, *, must_exist: bool = False) -> Config:
    return load(getattr(args, "config", None), must_exist=must_exist)


def _connect_host(host: str) -> str:
    """Where a client on this machine reaches a server bound to `host`."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def gateway_url(cfg: Config) -> str:
    return f"http://{_url_host(_connect_host(cfg.server.host))}:{cfg.server.port}"


def proxy_url(cfg: Config, port: int | None = None) -> str:
    return f"http://{_url_host(_connect_host(cfg.proxy.host))}:{cfg.proxy.port if port is None else port}"


def _print(*parts: object, file: TextIO | None = None) -> None:
    print(*parts, file=file or sys.stdout, flush=True)


def _model_or_fail(cfg: Config, model_id: str) -> ModelConfig:
    model = cfg.model(model_id)
    if model is None:
        known = ", ".join(m.id for m in cfg.models) or "none configured"
        raise CommandError(f"unknown model {model_id!r} (configured: {known})")
    return model


# ---- serve -----------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    cfg = _load_config(args)
    server = cfg.server
    if args.host is not None:
        server = msgspec.structs.replace(server, host=args.host)
    if args.port is not None:
        server = msgspec.structs.replace(server, port=args.port)
    if args.data_dir is not None:
        server = msgspec.structs.replace(server, data_dir=str(Path(args.data_dir).expanduser().absolute()))
    proxy_cfg = cfg.proxy
    if args.proxy is not None:
        proxy_cfg = msgspec.structs.replace(proxy_cfg, enabled=args.proxy)
    if args.proxy_port is not None:
        proxy_cfg = msgspec.structs.replace(proxy_cfg, port=args.proxy_port)
    cfg = msgspec.structs.replace(cfg, server=server, proxy=proxy_cfg)
    if not 0 < cfg.server.port < 65536:
        raise ConfigError(f"{cfg.source}: server.port: must be between 1 and 65535")

    gateway = importlib.import_module("cursor_byok.gateway")  # heavy: only `serve` needs it

    proxy_thread = _start_proxy(cfg) if cfg.proxy.enabled else None
    try:
        return int(gateway.serve(cfg) or 0)
    finally:
        if proxy_thread is not None:
            proxy_thread.stop()
            log.info("proxy stopped")


def _start_proxy(cfg: Config) -> ProxyThread:
    from .interceptor import CAError, CAState, InterceptingProxy, LocalCA, ProxyThread, ca_trust_state

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
    proxy = InterceptingProxy(ca, gateway_url(cfg), cfg.proxy.host, cfg.proxy.port)
    thread = ProxyThread(proxy)
    try:
        port = thread.start()
    except OSError as exc:
        raise CommandError(
            f"proxy cannot listen on {cfg.proxy.host}:{cfg.proxy.port}: {exc.strerror or exc} "
            "(another cursor-byok running? change [proxy] port or pass --proxy-port)"
        ) from None
    log.info("proxy listening", extra={"proxy_url": proxy_url(cfg, port), "gateway": gateway_url(cfg)})
    return thread


# ---- doctor ----------------------------------------------------------------------------------


class CheckStatus(str, enum.Enum):
    OK = "ok"
    INFO = "info"
    WARN = "warn"
    FAIL = "FAIL"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: CheckStatus
    detail: str


def hotpath_check(environ: dict[str, str] | None = None) -> Check:
    env = os.environ if environ is None else environ
    try:
        from . import hotpath
    except ImportError as exc:
        return Check("hot path", CheckStatus.FAIL, f"cannot import: {exc}")
    impl = hotpath.implementation()
    folder = Path(hotpath.__file__).parent
    built = sorted(
        name for name in impl if any(folder.glob(f"_{name}.*.so")) or any(folder.glob(f"_{name}.*.pyd"))
    )
    summary = ", ".join(f"{name}={kind}" for name, kind in sorted(impl.items()))
    python = [name for name, kind in impl.items() if kind == "python"]
    if not python:
        return Check("hot path", CheckStatus.OK, summary)
    required = env.get(REQUIRE_COMPILED_ENV) == "1"
    expected = [name for name in python if name in built]
    if required or expected:
        why = f"{REQUIRE_COMPILED_ENV}=1" if required else f"compiled build present for {', '.join(expected)}"
        return Check("hot path", CheckStatus.FAIL, f"{summary} ({why}, but the pure-Python twin is active)")
    return Check("hot path", CheckStatus.WARN, f"{summary} (not compiled: run `make serve` or reinstall with a compiler)")


def _key_checks(cfg: Config) -> list[Check]:
    if not cfg.models:
        return [Check("models", CheckStatus.WARN, "no [[models]] configured: Cursor will only see upstream models")]
    checks = []
    for model in cfg.models:
        name = f"model {model.id}"
        if not (model.api_key_env or model.api_key_secret):
            checks.append(Check(name, CheckStatus.INFO, "no API key configured (fine for local servers)"))
            continue
        try:
            resolve_api_key(cfg, model)
        except ConfigError as exc:
            checks.append(Check(name, CheckStatus.FAIL, str(exc)))
            continue
        source = f"${model.api_key_env}" if model.api_key_env else f"secret {model.api_key_secret!r}"
        checks.append(Check(name, CheckStatus.OK, f"key present ({source})"))
    return checks


def _base_url(model: ModelConfig) -> str:
    return model.base_url or _DEFAULT_BASE_URLS[ProviderKind(model.provider)]


async def _provider_checks(cfg: Config) -> list[Check]:
    import httpx

    async def probe(client: httpx.AsyncClient, model: ModelConfig) -> Check:
        url = _base_url(model)
        started = time.perf_counter()
        try:
            # No key is sent: this only says whether the endpoint answers at all.
            response = await client.get(url)
        except httpx.HTTPError as exc:
            return Check(f"reach {model.id}", CheckStatus.FAIL, f"{url}: unreachable ({exc.__class__.__name__})")
        ms = (time.perf_counter() - started) * 1000
        return Check(f"reach {model.id}", CheckStatus.OK, f"{url}: HTTP {response.status_code} in {ms:.0f} ms")

    async with httpx.AsyncClient(timeout=PROVIDER_CHECK_TIMEOUT, follow_redirects=False) as client:
        return list(await asyncio.gather(*(probe(client, m) for m in cfg.models)))


def _port_state(host: str, port: int, health_path: str) -> tuple[bool, bool]:
    """(free, ours): can we bind it; if not, does a cursor-byok health endpoint answer there."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        if os.name == "posix":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            return True, False
        except OSError:
            pass
    import httpx

    try:
        url = f"http://{_url_host(_connect_host(host))}:{port}{health_path}"
        response = httpx.get(url, timeout=1.0, trust_env=False)
        return False, response.status_code == 204
    except httpx.HTTPError:
        return False, False


def _ca_check(cfg: Config) -> Check:
    from .interceptor import CAState, ca_trust_state

    report = ca_trust_state(cfg.data_path)
    detail = report.state.value + (f" ({report.detail})" if report.detail else "")
    if report.state is CAState.TRUSTED:
        return Check("local CA", CheckStatus.OK, f"trusted, sha256 {report.fingerprint}")
    severe = report.state in (CAState.MISSING, CAState.INVALID) and cfg.proxy.enabled
    return Check("local CA", CheckStatus.FAIL if severe else CheckStatus.WARN, detail)


def _cursor_settings_check(cfg: Config, settings_path: str | None) -> Check:
    from .cursor_settings import BACKUP_FILE_NAME, CursorSettings, IntegrationState, SettingsError, default_settings_path

    path = Path(settings_path).expanduser() if settings_path else default_settings_path()
    try:
        status = CursorSettings(path, cfg.data_path / BACKUP_FILE_NAME).status(proxy_url(cfg))
    except SettingsError as exc:
        return Check("cursor settings", CheckStatus.WARN, str(exc))
    if not status.exists:
        return Check("cursor settings", CheckStatus.INFO, f"{path} does not exist (Cursor not installed for this user?)")
    extra = ("; " + "; ".join(status.warnings)) if status.warnings else ""
    if status.state is IntegrationState.ENABLED:
        return Check("cursor settings", CheckStatus.WARN if extra else CheckStatus.OK, f"proxy keys set in {path}{extra}")
    if status.state is IntegrationState.PARTIAL:
        return Check(
            "cursor settings",
            CheckStatus.WARN,
            f"proxy keys partly set or for another URL in {path} (run `cursor-byok cursor enable`){extra}",
        )
    return Check("cursor settings", CheckStatus.INFO, f"not enabled in {path} (`cursor-byok cursor enable`){extra}")


def _port_checks(cfg: Config) -> list[Check]:
    checks = []
    for name, host, port, health, what in (
        ("server port", cfg.server.host, cfg.server.port, GATEWAY_HEALTH_PATH, "cursor-byok server"),
        ("proxy port", cfg.proxy.host, cfg.proxy.port, PROXY_HEALTH_PATH, "cursor-byok proxy"),
    ):
        free, ours = _port_state(host, port, health)
        where = f"{host}:{port}"
        if free:
            checks.append(Check(name, CheckStatus.OK, f"{where} free"))
        elif ours:
            checks.append(Check(name, CheckStatus.OK, f"{where} in use by a running {what}"))
        else:
            checks.append(Check(name, CheckStatus.WARN, f"{where} in use by another program"))
    return checks


def cmd_doctor(args: argparse.Namespace) -> int:
    checks: list[Check] = [hotpath_check()]
    path = config_path(getattr(args, "config", None))
    try:
        cfg = _load_config(args)
    except ConfigError as exc:
        checks.append(Check("config", CheckStatus.FAIL, str(exc)))
        _print_checks(checks)
        raise
    checks.append(Check("config", CheckStatus.OK, f"{cfg.source}" if path.exists() else f"{path} not found; using defaults"))
    checks.extend(_key_checks(cfg))
    if args.check_providers and cfg.models:
        checks.extend(asyncio.run(_provider_checks(cfg)))
    checks.append(_ca_check(cfg))
    checks.append(_cursor_settings_check(cfg, args.settings))
    checks.extend(_port_checks(cfg))
    _print_checks(checks)
    failed = [c for c in checks if c.status is CheckStatus.FAIL]
    _print(f"{len(failed)} check(s) failed" if failed else "all required checks passed")
    return 1 if failed else 0


def _print_checks(checks: Sequence[Check]) -> None:
    for check in checks:
        _print(f"{check.status.value:<5} {check.name}: {check.detail}")


# ---- config ----------------------------------------------------------------------------------


def cmd_config_path(args: argparse.Namespace) -> int:
    _print(config_path(args.config).absolute())
    return 0


def cmd_config_validate(args: argparse.Namespace) -> int:
    cfg = _load_config(args, must_exist=True)
    for model in cfg.models:
        resolve_api_key(cfg, model)  # a missing env var or a bad secrets file is a config error too
    _print(f"ok: {cfg.source}")
    return 0


# ---- models ----------------------------------------------------------------------------------


def _key_present(cfg: Config, model: ModelConfig) -> str:
    if not (model.api_key_env or model.api_key_secret):
        return "-"
    try:
        resolve_api_key(cfg, model)
    except ConfigError:
        return "no"
    return "yes"


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def cmd_models_list(args: argparse.Namespace) -> int:
    cfg = _load_config(args)
    if not cfg.models:
        _print(f"no models configured in {cfg.source}")
        return 0
    rows = [("ID", "PROVIDER", "MODEL", "CONTEXT", "KEY")]
    for m in cfg.models:
        rows.append((m.id, ProviderKind(m.provider).value, m.model, str(m.context_window), _key_present(cfg, m)))
    for line in _table(rows):
        _print(line)
    return 0


@dataclass(slots=True)
class ModelTestResult:
    text: str
    ttft_ms: float | None
    total_ms: float
    output_tokens: int | None
    tokens_per_second: float | None


async def run_model_test(model: ModelConfig, api_key: str, prompt: str, max_tokens: int) -> ModelTestResult:
    from .http_client import streaming_client
    from .providers import Message, ModelRequest, TextDelta, TextPart, ThinkingDelta, Usage, make_provider

    request = ModelRequest(
        model=model.model,
        system="You are a helpful assistant. Answer briefly.",
        messages=[Message(role="user", parts=[TextPart(text=prompt)])],
        tools=[],
        max_tokens=max_tokens,
        effort=model.default_effort or None,
        thinking_budget=model.thinking_budget_tokens or None,
        extra_params={},
    )
    text: list[str] = []
    output_tokens: int | None = None
    first: float | None = None
    async with streaming_client() as client:  # the provider bounds its own waits
        provider = make_provider(model, api_key, client)
        started = time.perf_counter()
        async for event in provider.stream(request):
            if isinstance(event, (TextDelta, ThinkingDelta)) and event.text and first is None:
                first = time.perf_counter()
            if isinstance(event, TextDelta):
                text.append(event.text)
            elif isinstance(event, Usage) and event.output_tokens is not None:
                output_tokens = event.output_tokens
        ended = time.perf_counter()
    ttft = (first - started) * 1000 if first is not None else None
    rate = None
    if output_tokens and first is not None and ended > first:
        rate = output_tokens / (ended - first)
    return ModelTestResult("".join(text), ttft, (ended - started) * 1000, output_tokens, rate)


def cmd_models_test(args: argparse.Namespace) -> int:
    cfg = _load_config(args)
    model = _model_or_fail(cfg, args.model_id)
    api_key = resolve_api_key(cfg, model)
    from .providers import ProviderError

    max_tokens = min(args.max_tokens, model.max_output_tokens)
    try:
        result = asyncio.run(run_model_test(model, api_key, args.prompt, max_tokens))
    except ProviderError as exc:
        raise CommandError(f"model {model.id}: {exc}") from None
    _print(result.text.strip() or "(no text)")
    _print(
        f"ttft: {'n/a' if result.ttft_ms is None else f'{result.ttft_ms:.0f} ms'}"
        f"  total: {result.total_ms:.0f} ms"
        f"  output tokens: {'n/a' if result.output_tokens is None else result.output_tokens}"
        f"  tokens/s: {'n/a' if result.tokens_per_second is None else f'{result.tokens_per_second:.1f}'}"
    )
    return 0


# ---- conversations ---------------------------------------------------------------------------


def _when(ms: int | None) -> str:
    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).astimezone().strftime("%Y-%m-%d %H:%M:%S")


async def _with_store(cfg: Config, action: Callable[[Any], Any]) -> Any:
    from .store import Store

    store = await Store.open(cfg.database_path)
    try:
        return await action(store)
    finally:
        await store.close()


def _database_exists(cfg: Config) -> bool:
    return cfg.database_path.exists()


def cmd_conversations_list(args: argparse.Namespace) -> int:
    cfg = _load_config(args)
    if not _database_exists(cfg):
        _print(f"no conversations yet ({cfg.database_path} does not exist)")
        return 0

    async def fetch(store: Any) -> list[Any]:
        return await store.list_conversations(args.limit, args.offset)

    records = asyncio.run(_with_store(cfg, fetch))
    if args.json:
        _print(json.dumps(msgspec.to_builtins(records), indent=2, ensure_ascii=False))
        return 0
    if not records:
        _print("no conversations")
        return 0
    rows = [("CONVERSATION", "UPDATED", "MODEL", "PARENT", "TITLE")]
    for r in records:
        parent = r.parent.parent_conversation_id if r.parent else "-"
        rows.append((r.conversation_id, _when(r.updated_at_ms), r.model_id or "-", parent, (r.title or "-")[:60]))
    for line in _table(rows):
        _print(line)
    return 0


def cmd_conversations_show(args: argparse.Namespace) -> int:
    cfg = _load_config(args)
    if not _database_exists(cfg):
        raise CommandError(f"no conversation {args.conversation_id!r} ({cfg.database_path} does not exist)")

    async def fetch(store: Any) -> tuple[Any, list[Any]]:
        record = await store.get_conversation(args.conversation_id)
        runs = await store.list_runs(args.conversation_id) if record is not None else []
        return record, runs

    record, runs = asyncio.run(_with_store(cfg, fetch))
    if record is None:
        raise CommandError(f"no conversation {args.conversation_id!r}")
    data = msgspec.to_builtins(record)
    for key in ("created_at_ms", "updated_at_ms"):
        data[key.removesuffix("_ms")] = _when(data.pop(key))
    data["runs"] = len(runs)
    width = max(len(k) for k in data)
    for key, value in data.items():
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else ("-" if value is None else value)
        _print(f"{key.ljust(width)}  {shown}")
    return 0


def cmd_conversations_export(args: argparse.Namespace) -> int:
    cfg = _load_config(args)
    if not _database_exists(cfg):
        raise CommandError(f"no conversation {args.conversation_id!r} ({cfg.database_path} does not exist)")

    async def fetch(store: Any) -> dict[str, Any] | None:
        return await store.export_conversation(args.conversation_id)

    exported = asyncio.run(_with_store(cfg, fetch))
    if exported is None:
        raise CommandError(f"no conversation {args.conversation_id!r}")
    text = json.dumps(exported, indent=2, ensure_ascii=False) + "\n"
    if args.out:
        out = Path(args.out).expanduser()
        # Conversations hold code and prompts: the export is private like the database.
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        _print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


# ---- cursor (settings.json) ------------------------------------------------------------------


def _cursor_settings(args: argparse.Namespace, cfg: Config) -> CursorSettings:
    from .cursor_settings import BACKUP_FILE_NAME, CursorSettings, default_settings_path

    path = Path(args.settings).expanduser() if args.settings else default_settings_path()
    return CursorSettings(path, cfg.data_path / BACKUP_FILE_NAME)


def cmd_cursor_enable(args: argparse.Namespace) -> int:
    from .cursor_settings import SettingsError
    from .interceptor import CAState, ca_trust_state

    cfg = _load_config(args)
    trust = ca_trust_state(cfg.data_path)
    if trust.state in (CAState.MISSING, CAState.INVALID) and not args.force:
        raise CommandError(
            f"local CA is {trust.state.value}: run `cursor-byok ca init` and `cursor-byok ca install` first "
            "(or pass --force)"
        )
    if trust.state is CAState.UNTRUSTED:
        _print(f"warning: the local CA is not trusted yet: {trust.detail}", file=sys.stderr)
    url = args.proxy_url or proxy_url(cfg)
    settings = _cursor_settings(args, cfg)
    try:
        changed = settings.enable(url, proxy_support=args.proxy_support)
    except SettingsError as exc:
        raise CommandError(str(exc)) from None
    _print(f"enabled: {settings.path} now points Cursor at {url}")
    _print(f"changed: {', '.join(changed) if changed else 'nothing (already set)'}")
    _print("next: run `cursor-byok serve --proxy`, then quit Cursor completely and start it again")
    return 0


def cmd_cursor_disable(args: argparse.Namespace) -> int:
    from .cursor_settings import SettingsError

    cfg = _load_config(args)
    settings = _cursor_settings(args, cfg)
    try:
        touched = settings.disable()
    except SettingsError as exc:
        raise CommandError(str(exc)) from None
    if touched:
        _print(f"disabled: restored {', '.join(touched)} in {settings.path}")
        _print("next: quit Cursor completely and start it again")
    else:
        _print(f"nothing to undo in {settings.path}")
    return 0


def cmd_cursor_status(args: argparse.Namespace) -> int:
    from .cursor_settings import MANAGED_KEYS, SettingsError

    cfg = _load_config(args)
    settings = _cursor_settings(args, cfg)
    url = args.proxy_url or proxy_url(cfg)
    try:
        status = settings.status(url)
    except SettingsError as exc:
        raise CommandError(str(exc)) from None
    _print(f"settings: {status.path}{'' if status.exists else ' (does not exist)'}")
    _print(f"state: {status.state.value} (expected proxy {url})")
    for key in MANAGED_KEYS:
        value = status.values.get(key)
        _print(f"  {key}: {'(unset)' if key not in status.values else json.dumps(value)}")
    _print(f"backup: {'present' if status.backup_present else 'none'} ({settings.backup_path})")
    for warning in status.warnings:
        _print(f"warning: {warning}")
    return 0


# ---- ca --------------------------------------------------------------------------------------


def cmd_ca_init(args: argparse.Namespace) -> int:
    from .interceptor import CAError, LocalCA

    cfg = _load_config(args)
    try:
        ca, created = LocalCA.load_or_create(cfg.data_path)
    except CAError as exc:
        raise CommandError(str(exc)) from None
    _print(f"{'created' if created else 'exists'}: {ca.paths.cert}")
    _print(f"sha256 fingerprint: {ca.fingerprint}")
    _print(f"valid until: {ca.not_valid_after:%Y-%m-%d}")
    if created:
        _print("next: `cursor-byok ca install` shows the command that makes your system trust it")
    return 0


def cmd_ca_show(args: argparse.Namespace) -> int:
    from .interceptor import CAError, LocalCA, ca_trust_state

    cfg = _load_config(args)
    try:
        ca = LocalCA.load(cfg.data_path)
    except CAError as exc:
        raise CommandError(str(exc)) from None
    if args.pem:
        sys.stdout.write(ca.cert_pem.decode("ascii"))
        return 0
    trust = ca_trust_state(cfg.data_path)
    _print(f"certificate: {ca.paths.cert}")
    _print(f"key: {ca.paths.key} (never leaves this machine)")
    _print(f"sha256 fingerprint: {ca.fingerprint}")
    _print(f"valid until: {ca.not_valid_after:%Y-%m-%d}")
    _print(f"trust: {trust.state.value}{f' ({trust.detail})' if trust.detail else ''}")
    return 0


def cmd_ca_install(args: argparse.Namespace) -> int:
    from .interceptor import CAError, CAState, LocalCA, ca_trust_state, format_commands, trust_commands

    cfg = _load_config(args)
    try:
        ca, created = LocalCA.load_or_create(cfg.data_path)
    except CAError as exc:
        raise CommandError(str(exc)) from None
    if created:
        _print(f"created: {ca.paths.cert} (sha256 {ca.fingerprint})", file=sys.stderr)
    commands = trust_commands(ca.paths.cert)
    if not args.run:
        for line in format_commands(commands):
            _print(line)
        if sys.platform.startswith("linux"):
            _print(
                "# optional, if Cursor still rejects the certificate (Chromium's NSS store):\n"
                f"# certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n cursor-byok -i {ca.paths.cert}"
            )
        return 0
    for argv in commands:
        _print(f"running: {format_commands([argv])[0]}", file=sys.stderr)
        try:
            done = subprocess.run(argv, check=False)
        except OSError as exc:
            raise CommandError(f"{argv[0]}: {exc.strerror or exc}") from None
        if done.returncode != 0:
            raise CommandError(f"`{format_commands([argv])[0]}` failed with exit status {done.returncode}")
    trust = ca_trust_state(cfg.data_path)
    _print(f"trust: {trust.state.value}{f' ({trust.detail})' if trust.detail else ''}")
    return 0 if trust.state in (CAState.TRUSTED, CAState.UNKNOWN) else 1


# ---- argument parsing ------------------------------------------------------------------------


def _positive_port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"port out of range: {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    # Options every subcommand accepts, before or after its name.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS, help=f"config file (default: ${CONFIG_ENV} or the user config dir)")
    common.add_argument("--log-format", choices=("text", "json"), default=argparse.SUPPRESS)
    common.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default=argparse.SUPPRESS)

    parser = argparse.ArgumentParser(prog=PROG, description="Cursor's agent backend, run locally on your own model keys.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--config", metavar="PATH", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--log-format", choices=("text", "json"), default="text", help="log line format (default: text)")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("serve", parents=[common], help="run the server (and optionally the proxy for the IDE)")
    p.add_argument("--host")
    p.add_argument("--port", type=_positive_port)
    p.add_argument("--data-dir", metavar="DIR")
    p.add_argument("--proxy", action=argparse.BooleanOptionalAction, default=None, help="also run the intercepting proxy the IDE uses (default: [proxy] enabled)")
    p.add_argument("--proxy-port", type=_positive_port, metavar="N")
    p.set_defaults(handler=cmd_serve)

    p = sub.add_parser("doctor", parents=[common], help="check the installation and configuration")
    p.add_argument("--check-providers", action="store_true", help="also contact each model's base_url (5 s timeout; no key is sent)")
    p.add_argument("--settings", metavar="PATH", help="Cursor settings.json to inspect")
    p.set_defaults(handler=cmd_doctor)

    config_cmd = sub.add_parser("config", help="config file helpers")
    config_sub = config_cmd.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    config_sub.add_parser("path", parents=[common], help="print the config file path in use").set_defaults(handler=cmd_config_path)
    config_sub.add_parser("validate", parents=[common], help="validate the config file and its secrets").set_defaults(handler=cmd_config_validate)

    models = sub.add_parser("models", help="configured models")
    models_sub = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    models_sub.add_parser("list", parents=[common], help="list configured models").set_defaults(handler=cmd_models_list)
    p = models_sub.add_parser("test", parents=[common], help="send one prompt and report latency and speed")
    p.add_argument("model_id", metavar="MODEL_ID")
    p.add_argument("--prompt", default="Say hello in five words.")
    p.add_argument("--max-tokens", type=int, default=256)
    p.set_defaults(handler=cmd_models_test)

    conv = sub.add_parser("conversations", help="stored conversations")
    conv_sub = conv.add_subparsers(dest="conversations_command", metavar="ACTION", required=True)
    p = conv_sub.add_parser("list", parents=[common], help="most recently updated first")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_conversations_list)
    p = conv_sub.add_parser("show", parents=[common], help="one conversation's record")
    p.add_argument("conversation_id", metavar="ID")
    p.set_defaults(handler=cmd_conversations_show)
    p = conv_sub.add_parser("export", parents=[common], help="everything stored about a conversation, as JSON")
    p.add_argument("conversation_id", metavar="ID")
    p.add_argument("--out", metavar="FILE")
    p.set_defaults(handler=cmd_conversations_export)

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
            p.add_argument("--proxy-support", choices=("override", "on"), default="override")
            p.add_argument("--force", action="store_true", help="enable even if the local CA does not exist yet")
        p.set_defaults(handler=handler)

    ca = sub.add_parser("ca", help="the local CA the proxy signs *.cursor.sh certificates with")
    ca_sub = ca.add_subparsers(dest="ca_command", metavar="ACTION", required=True)
    ca_sub.add_parser("init", parents=[common], help="create the CA if missing; print path and fingerprint").set_defaults(handler=cmd_ca_init)
    p = ca_sub.add_parser("show", parents=[common], help="path, fingerprint and trust state")
    p.add_argument("--pem", action="store_true", help="print the certificate (PEM) only")
    p.set_defaults(handler=cmd_ca_show)
    p = ca_sub.add_parser("install", parents=[common], help="print (or --run) the command that trusts the CA")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--print", action="store_true", dest="print_only", help="print the commands (default)")
    mode.add_argument("--run", action="store_true", help="run them (asks for sudo / admin rights)")
    p.set_defaults(handler=cmd_ca_install)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    setup_logging(args.log_format, args.log_level)
    try:
        return int(args.handler(args) or 0)
    except ConfigError as exc:
        _print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except CommandError as exc:
        _print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
