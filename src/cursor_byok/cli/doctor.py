"""`cursor-byok doctor`: every check of the installation and configuration, one line each."""
from __future__ import annotations

import argparse
import asyncio
import enum
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config import (
    Config,
    ConfigError,
    ModelConfig,
    ProviderKind,
    config_path,
    resolve_api_key,
)
from .common import (
    GATEWAY_HEALTH_PATH,
    PROXY_HEALTH_PATH,
    REQUIRE_COMPILED_ENV,
    connect_host,
    echo,
    load_config,
    proxy_url,
    url_host,
)

PROVIDER_CHECK_TIMEOUT = 5.0
_DEFAULT_BASE_URLS = {
    ProviderKind.OPENAI_CHAT: "https://api.openai.com/v1",
    ProviderKind.OPENAI_RESPONSES: "https://api.openai.com/v1",
    ProviderKind.ANTHROPIC: "https://api.anthropic.com",
}


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
        from .. import hotpath
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


def base_url(model: ModelConfig) -> str:
    return model.base_url or _DEFAULT_BASE_URLS[ProviderKind(model.provider)]


async def _provider_checks(cfg: Config) -> list[Check]:
    import httpx

    async def probe(client: httpx.AsyncClient, model: ModelConfig) -> Check:
        url = base_url(model)
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


def _security_checks(cfg: Config) -> list[Check]:
    from .. import local_trust
    from ..datadir import open_entries

    exposed = open_entries(cfg.data_path)
    if exposed:
        checks = [Check("data dir", CheckStatus.WARN, entry.describe()) for entry in exposed]
    elif cfg.data_path.is_dir():
        checks = [Check("data dir", CheckStatus.OK, f"{cfg.data_path} is private to you")]
    else:
        checks = [Check("data dir", CheckStatus.INFO, f"{cfg.data_path} does not exist yet (created 0700 by `serve`)")]
    try:
        token = local_trust.auth_token(cfg)
    except ConfigError as exc:
        return [*checks, Check("auth token", CheckStatus.FAIL, str(exc))]
    if not token:
        checks.append(Check("auth token", CheckStatus.INFO, "not set: every local user and program can use the server (set server.auth_token_env on a shared machine)"))
    else:
        checks.append(
            Check(
                "auth token",
                CheckStatus.OK,
                f"required on every request ({local_trust.AUTH_TOKEN_HEADER} or authorization: Bearer); the proxy adds it; "
                f"give the Cursor CLI the token in its endpoint: "
                f"CURSOR_API_ENDPOINT=http://{url_host(connect_host(cfg.server.host))}:{cfg.server.port}{local_trust.TOKEN_PATH_PREFIX}<token> cursor-agent",
            )
        )
    return checks


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
        url = f"http://{url_host(connect_host(host))}:{port}{health_path}"
        response = httpx.get(url, timeout=1.0, trust_env=False)
        return False, response.status_code == 204
    except httpx.HTTPError:
        return False, False


def _ca_check(cfg: Config) -> Check:
    from ..interceptor import CAState, ca_trust_state

    report = ca_trust_state(cfg.data_path)
    detail = report.state.value + (f" ({report.detail})" if report.detail else "")
    if report.state is CAState.TRUSTED:
        return Check("local CA", CheckStatus.OK, f"trusted, sha256 {report.fingerprint}")
    severe = report.state in (CAState.MISSING, CAState.INVALID) and cfg.proxy.enabled
    return Check("local CA", CheckStatus.FAIL if severe else CheckStatus.WARN, detail)


def _cursor_settings_check(cfg: Config, settings_path: str | None) -> Check:
    from ..cursor_settings import (
        BACKUP_FILE_NAME,
        CursorSettings,
        IntegrationState,
        SettingsError,
        default_settings_path,
    )

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
        cfg = load_config(args)
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
    checks.extend(_security_checks(cfg))
    checks.extend(_port_checks(cfg))
    _print_checks(checks)
    failed = [c for c in checks if c.status is CheckStatus.FAIL]
    echo(f"{len(failed)} check(s) failed" if failed else "all required checks passed")
    return 1 if failed else 0


def _print_checks(checks: Sequence[Check]) -> None:
    for check in checks:
        echo(f"{check.status.value:<5} {check.name}: {check.detail}")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("doctor", parents=[common], help="check the installation and configuration")
    p.add_argument("--check-providers", action="store_true", help="also contact each model's base_url (5 s timeout; no key is sent)")
    p.add_argument("--settings", metavar="PATH", help="Cursor settings.json to inspect")
    p.set_defaults(handler=cmd_doctor)
