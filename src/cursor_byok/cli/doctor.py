"""`cursor-byok doctor`: every check of the installation and configuration, one line each."""
from __future__ import annotations

import argparse
import enum
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import (
    Config,
    ConfigError,
    ModelConfig,
    ProviderKind,
    config_path,
)
from .chain import corporate_proxy, cursor_settings, describe_chain
from .common import (
    GATEWAY_HEALTH_PATH,
    PROXY_HEALTH_PATH,
    REQUIRE_COMPILED_ENV,
    echo,
    gateway_url,
    key_status,
    load_config,
    proxy_url,
    run_async,
)
from ..instance import port_holder
from .ports import PortState, port_state
from .team_link import TeamProblem, read_link, team_client, team_models

PROVIDER_CHECK_TIMEOUT = 5.0
_REBUILD = "install a wheel, or install again where a C compiler works (from a checkout: make clean serve)"
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
    fix: str = ""  # the command (or edit) that fixes a FAIL or WARN


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
        return Check("hot path", CheckStatus.FAIL, f"{summary} ({why}, but the pure-Python twin is active)", _REBUILD)
    if len(python) == len(impl):  # an install with no compiled build at all (no C compiler at install time)
        return Check(
            "hot path", CheckStatus.WARN,
            "pure Python (slower: framing, seqno reordering and prefix hashing run as Python, "
            "not as the compiled extension)",
            _REBUILD,
        )
    return Check("hot path", CheckStatus.WARN, f"{summary} (not compiled)", _REBUILD)


def _key_checks(cfg: Config) -> list[Check]:
    if not cfg.models:
        return [Check("models", CheckStatus.WARN, "no [[models]] configured: Cursor will only see upstream models")]
    checks = []
    for model in cfg.models:
        name = f"model {model.id}"
        key = key_status(cfg, model)
        if not key.needed:
            checks.append(Check(name, CheckStatus.INFO, "no API key configured (fine for local servers)"))
        elif not key.present:
            checks.append(Check(name, CheckStatus.FAIL, key.problem, key.fix))
        else:
            checks.append(Check(name, CheckStatus.OK, f"key present ({key.source})"))
    return checks


def base_url(model: ModelConfig) -> str:
    return model.base_url or _DEFAULT_BASE_URLS[ProviderKind(model.provider)]


async def _provider_checks(cfg: Config) -> list[Check]:
    import asyncio

    import httpx

    async def probe(client: httpx.AsyncClient, model: ModelConfig) -> Check:
        url = base_url(model)
        started = time.perf_counter()
        try:
            # No key is sent: this only says whether the endpoint answers at all.
            response = await client.get(url)
        except httpx.HTTPError as exc:
            return Check(
                f"reach {model.id}", CheckStatus.FAIL, f"{url}: unreachable ({exc.__class__.__name__})",
                f"check base_url of model {model.id} and your network, then `cursor-byok models test {model.id}`",
            )
        ms = (time.perf_counter() - started) * 1000
        return Check(f"reach {model.id}", CheckStatus.OK, f"{url}: HTTP {response.status_code} in {ms:.0f} ms")

    async with httpx.AsyncClient(timeout=PROVIDER_CHECK_TIMEOUT, follow_redirects=False) as client:
        return list(await asyncio.gather(*(probe(client, m) for m in cfg.models)))


def _security_checks(cfg: Config) -> list[Check]:
    from .. import local_trust
    from ..datadir import open_entries

    exposed = open_entries(cfg.data_path)
    if exposed:
        checks = [Check("data dir permissions", CheckStatus.WARN, entry.describe()) for entry in exposed]
    elif cfg.data_path.is_dir():
        checks = [Check("data dir permissions", CheckStatus.OK, f"{cfg.data_path} is private to you")]
    else:
        checks = [Check("data dir permissions", CheckStatus.INFO, f"{cfg.data_path} does not exist yet (created 0700 by `serve`)")]
    try:
        token = local_trust.auth_token(cfg)
    except ConfigError as exc:
        return [*checks, Check("auth token", CheckStatus.FAIL, str(exc))]
    if cfg.team.enabled:
        checks.append(Check(
            "team", CheckStatus.OK,
            "team server: every request but health needs a developer's token (cursor-byok users list)"
            + ("" if token else "; without server.auth_token_env any developer's token opens the dashboard and /metrics"),
        ))
    if not token:
        if not cfg.team.enabled:
            checks.append(Check("auth token", CheckStatus.INFO, "not set: every local user and program can use the server (set server.auth_token_env on a shared machine)"))
    else:
        checks.append(
            Check(
                "auth token",
                CheckStatus.OK,
                f"required on every request ({local_trust.AUTH_TOKEN_HEADER} or authorization: Bearer); the proxy adds it; "
                f"give the Cursor CLI the token in its endpoint: "
                f"CURSOR_API_ENDPOINT={gateway_url(cfg)}{local_trust.TOKEN_PATH_PREFIX}<token> cursor-agent",
            )
        )
    return checks


def _tls_check(cfg: Config) -> list[Check]:
    """The certificate and key `serve` would serve TLS with, if set: usable, for which names, until when."""
    from ..instance import TlsFilesError, checked_tls_files

    try:
        files = checked_tls_files(cfg.server.tls_cert, cfg.server.tls_key)
    except TlsFilesError as exc:
        return [Check("tls", CheckStatus.FAIL, str(exc), "point server.tls_cert and server.tls_key at the PEM certificate and its key")]
    if files is None:
        return []
    from cryptography import x509

    leaf = x509.load_pem_x509_certificate(files.cert.read_bytes())
    try:
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        shown = ", ".join(str(n.value) for n in names)
    except x509.ExtensionNotFound:
        shown = leaf.subject.rfc4514_string()
    until = leaf.not_valid_after_utc
    status = CheckStatus.OK if until.timestamp() > time.time() else CheckStatus.FAIL
    return [Check("tls", status, f"{files.cert} for {shown}, valid until {until:%Y-%m-%d}", "renew the certificate")]


def _team_check(cfg: Config) -> list[Check]:
    """The team server `connect` links this machine to, if any: reachable, its certificate valid
    here, the developer token accepted, models listed."""
    link = read_link(cfg.data_path)
    if link is None:
        return []
    try:
        with team_client() as client:
            ids = team_models(client, link)
    except TeamProblem as exc:
        return [Check("team server", CheckStatus.FAIL, str(exc), f"cursor-byok connect {link.url} --token-file FILE")]
    scheme = "TLS valid, " if link.url.startswith("https://") else ""
    return [Check("team server", CheckStatus.OK, f"{link.url}: reachable, {scheme}token accepted, models: {', '.join(ids[:12])}")]


def _ca_check(cfg: Config, cursor_pointed: bool) -> Check:
    from ..interceptor import CAState, ca_trust_state, has_name_constraints

    report = ca_trust_state(cfg.data_path)
    detail = report.state.value + (f" ({report.detail})" if report.detail else "")
    if report.state is CAState.TRUSTED:
        if not has_name_constraints(cfg.data_path):
            return Check("local CA", CheckStatus.WARN, "trusted, but it can sign for any host (made by an older release)",
                         "cursor-byok ca init --rotate")
        return Check("local CA", CheckStatus.OK, f"trusted, sha256 {report.fingerprint}")
    needed = cfg.proxy.enabled or cursor_pointed
    if report.state in (CAState.MISSING, CAState.INVALID):
        fix = "cursor-byok ca init && cursor-byok ca install --run"
        return Check("local CA", CheckStatus.FAIL if needed else CheckStatus.WARN, detail, fix)
    if report.state is CAState.UNTRUSTED and cursor_pointed:
        return Check(
            "local CA", CheckStatus.FAIL,
            f"{detail}; Cursor is pointed at the proxy and will reject every *.cursor.sh certificate",
            "cursor-byok ca install --run",
        )
    return Check("local CA", CheckStatus.WARN, detail, "cursor-byok ca install --run" if report.state is CAState.UNTRUSTED else "")


def _cursor_settings_check(cfg: Config, settings_path: str | None) -> tuple[Check, str | None]:
    """The settings check, and the loopback proxy URL Cursor is pointed at (None if not)."""
    from ..cursor_settings import PROXY_KEY, IntegrationState, SettingsError, is_loopback_proxy

    settings = cursor_settings(cfg, settings_path)
    path = settings.path
    try:
        status = settings.status(proxy_url(cfg))
    except SettingsError as exc:
        return Check("cursor settings", CheckStatus.WARN, str(exc)), None
    if not status.exists:
        return Check("cursor settings", CheckStatus.INFO, f"{path} does not exist (Cursor not installed for this user?)"), None
    current = status.values.get(PROXY_KEY)
    pointed = current if is_loopback_proxy(current) else None
    extra = ("; " + "; ".join(status.warnings)) if status.warnings else ""
    if status.state is IntegrationState.ENABLED:
        mode = "HTTP/2, the agent as one Run stream" if status.http2 else "HTTP/1.1, RunSSE + BidiAppend"
        check = Check("cursor settings", CheckStatus.WARN if extra else CheckStatus.OK, f"proxy keys set in {path} ({mode}){extra}")
    elif status.state is IntegrationState.PARTIAL:
        check = Check(
            "cursor settings", CheckStatus.WARN,
            f"proxy keys partly set or for another URL in {path}{extra}", "cursor-byok cursor enable",
        )
    else:
        check = Check("cursor settings", CheckStatus.INFO, f"not enabled in {path} (`cursor-byok cursor enable`){extra}")
    return check, pointed


def _pointed_proxy_check(cfg: Config, pointed: str) -> Check:
    """Cursor sends all its traffic to `pointed`: something that is our proxy must answer there."""
    from urllib.parse import urlsplit

    parts = urlsplit(pointed)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    state = port_state("127.0.0.1" if host == "localhost" else host, port, PROXY_HEALTH_PATH)
    ours = pointed.rstrip("/") == proxy_url(cfg)
    if state is PortState.OURS:
        if ours:
            return Check("cursor proxy", CheckStatus.OK, f"Cursor's proxy {pointed} is a running cursor-byok proxy")
        return Check("cursor proxy", CheckStatus.WARN, f"Cursor's proxy {pointed} is a cursor-byok proxy, but not this config's "
                     f"({proxy_url(cfg)})", "cursor-byok cursor enable")
    serve = "cursor-byok serve (with [proxy] enabled = true, or --proxy)" if ours else "cursor-byok cursor enable, then cursor-byok serve"
    if state is PortState.FREE:
        return Check("cursor proxy", CheckStatus.FAIL,
                     f"Cursor's settings point at {pointed} but nothing listens there: Cursor has no network at all",
                     f"{serve}; or `cursor-byok cursor disable`")
    return Check("cursor proxy", CheckStatus.FAIL,
                 f"Cursor's settings point at {pointed}, where a program that is not cursor-byok's proxy listens",
                 f"stop that program, or set another [proxy] port and run {serve}")


def _port_checks(cfg: Config) -> list[Check]:
    checks = []
    for name, table_name, host, port, health, what in (
        ("server port", "server", cfg.server.host, cfg.server.port, GATEWAY_HEALTH_PATH, "cursor-byok server"),
        ("proxy port", "proxy", cfg.proxy.host, cfg.proxy.port, PROXY_HEALTH_PATH, "cursor-byok proxy"),
    ):
        state = port_state(host, port, health)
        where = f"{host}:{port}"
        if state is PortState.FREE:
            checks.append(Check(name, CheckStatus.OK, f"{where} free"))
        elif state is PortState.OURS:
            checks.append(Check(name, CheckStatus.OK, f"{where} in use by a running {what}"))
        else:
            checks.append(Check(name, CheckStatus.FAIL, f"{where} in use by {port_holder(port)}",
                                f"stop the program listening on {where}, or set another [{table_name}] port"))
    return checks


LOW_SPACE_BYTES = 64 * 1024 * 1024
NO_SPACE_BYTES = 1024 * 1024


def _data_dir_checks(cfg: Config) -> list[Check]:
    """Who holds the data dir (a stale lock file nobody holds is fine), whether a server could write
    there, and whether the database is healthy."""
    from ..instance import database_problem, lock_holder

    data_dir = cfg.data_path
    if not data_dir.exists():
        return [Check("data dir", CheckStatus.INFO, f"{data_dir} does not exist yet (created on first start)")]
    holder = lock_holder(data_dir)
    checks = [Check("data dir lock", CheckStatus.OK, f"held by {holder.describe()}" if holder else "free: no server is using this data dir")]
    free = shutil.disk_usage(data_dir).free
    if not os.access(data_dir, os.W_OK):
        checks.append(Check("data dir", CheckStatus.FAIL, f"{data_dir} is not writable: make it writable, or point [server] data_dir (or --data-dir) elsewhere"))
    elif free < NO_SPACE_BYTES:
        checks.append(Check("data dir", CheckStatus.FAIL, f"no space left on the disk of {data_dir} ({free // 1024} KiB free): free disk space"))
    elif free < LOW_SPACE_BYTES:
        checks.append(Check("data dir", CheckStatus.WARN, f"{data_dir}: only {free // 2**20} MiB free on its disk"))
    else:
        checks.append(Check("data dir", CheckStatus.OK, f"{data_dir} writable, {free // 2**20} MiB free"))
    if not cfg.embedded_store:
        return checks  # the database is PostgreSQL's (`_postgres_checks`)
    problem = database_problem(cfg.database_path)
    if problem:
        checks.append(Check("database", CheckStatus.FAIL, problem))
    elif cfg.database_path.exists():
        checks.append(Check("database", CheckStatus.OK, f"{cfg.database_path} passes SQLite's quick check"))
        from ..store import database_stats

        checks += _quarantine_checks(database_stats(cfg.database_path).quarantined)
    return checks


def _postgres_checks(cfg: Config) -> list[Check]:
    """The PostgreSQL store answers (psycopg installed, the database reachable): its size and turns."""
    from ..store import StoreError, database_stats

    try:
        stats = database_stats(cfg.store.url)
    except StoreError as exc:
        return [Check("database", CheckStatus.FAIL, f"the store's PostgreSQL database: {exc}")]
    checks = [Check("database", CheckStatus.OK, f"{stats.path} (PostgreSQL) answers: {stats.turns:,} turns stored")]
    return checks + _quarantine_checks(stats.quarantined)


def _quarantine_checks(quarantined: list[Any]) -> list[Check]:
    """Journaled streams a start could not resume: kept aside, one line each."""
    return [
        Check(
            "quarantined input", CheckStatus.WARN,
            f"conversation {q.conversation_id or 'unknown'} (request {q.request_id}): {q.appends} append(s) not resumed: {q.reason}",
        )
        for q in quarantined
    ]


def cmd_doctor(args: argparse.Namespace) -> int:
    checks: list[Check] = [hotpath_check()]
    path = config_path(getattr(args, "config", None))
    try:
        cfg = load_config(args)
    except ConfigError as exc:
        checks.append(Check("config", CheckStatus.FAIL, str(exc), "correct the lines below, then `cursor-byok config validate`"))
        _print_checks(checks)
        raise
    checks.append(Check("config", CheckStatus.OK, f"{cfg.source}" if path.exists() else f"{path} not found; using defaults"))
    checks.extend(_key_checks(cfg))
    if args.check_providers and cfg.models:
        checks.extend(run_async(_provider_checks(cfg)))
    settings_check, pointed = _cursor_settings_check(cfg, args.settings)
    cursor_pointed = pointed is not None and pointed.rstrip("/") == proxy_url(cfg)
    checks.append(_ca_check(cfg, cursor_pointed))
    checks.append(settings_check)
    if pointed is not None:
        checks.append(_pointed_proxy_check(cfg, pointed))
    checks.extend(_security_checks(cfg))
    checks.extend(_port_checks(cfg))
    if cfg.proxy.enabled or cursor_pointed:
        checks.append(Check("proxy chain", CheckStatus.INFO, describe_chain(cfg, corporate_proxy(cfg), os.environ)))
    checks.extend(_data_dir_checks(cfg))
    if not cfg.embedded_store:
        checks.extend(_postgres_checks(cfg))
    checks.extend(_tls_check(cfg))
    checks.extend(_team_check(cfg))
    _print_checks(checks)
    failed = [c for c in checks if c.status is CheckStatus.FAIL]
    echo(f"{len(failed)} check(s) failed" if failed else "all required checks passed")
    return 1 if failed else 0


def _print_checks(checks: Sequence[Check]) -> None:
    for check in checks:
        echo(f"{check.status.value:<5} {check.name}: {check.detail}")
        if check.fix and check.status in (CheckStatus.FAIL, CheckStatus.WARN):
            echo(f"      fix: {check.fix}")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("doctor", parents=[common], help="check the installation and configuration")
    p.add_argument("--check-providers", action="store_true", help="also contact each model's base_url (5 s timeout; no key is sent)")
    p.add_argument("--settings", metavar="PATH", help="Cursor settings.json to inspect")
    p.set_defaults(handler=cmd_doctor)
