"""Configuration: one TOML file, validated into msgspec Structs; secrets only by env var or 0600 file.

The keys in ARCHITECTURE.md's public contract are stable; unknown keys and wrong types are errors
that name the key.
"""
from __future__ import annotations

import enum
import os
import re
import stat
import time
import tomllib
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import platformdirs

APP_NAME = "cursor-byok"
CONFIG_ENV = "CURSOR_BYOK_CONFIG"
DEFAULT_UPSTREAM = "https://api2.cursor.sh"


class ConfigError(Exception):
    """Configuration problems, each worded as one line that names the bad key or file. `str()` is the
    first one (with a count of the rest); `problems` holds them all."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        self.problems = list(problems) or [message]
        more = len(self.problems) - 1
        super().__init__(self.problems[0] + (f" (and {more} more problem{'s' * (more > 1)})" if more else ""))


class ProviderKind(str, enum.Enum):
    OPENAI_CHAT = "openai-chat"
    OPENAI_RESPONSES = "openai-responses"
    ANTHROPIC = "anthropic"


class ServerConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    host: str = "127.0.0.1"
    port: int = 8787
    data_dir: str = ""  # empty: the platform user data dir
    max_body_bytes: int = 32 * 1024 * 1024
    max_frame_bytes: int = 16 * 1024 * 1024
    max_transports: int = 1024
    runsse_wait_seconds: float = 30.0  # how long an early RunSSE waits for its binding
    output_retention_seconds: float = 120.0  # finished runs' output kept for late RunSSE replay
    transport_idle_seconds: float = 900.0
    runtime_idle_seconds: float = 600.0  # an idle conversation leaves memory (its state is in SQLite)
    # Idle conversations' histories kept in memory beyond this much text leave it sooner, least
    # recently active first (the next turn reads the history again).
    idle_history_bytes: int = 4 * 1024 * 1024
    # After a turn the stream stays open this long for a follow-up on the same request id.
    continuation_window_seconds: float = 2.0
    blob_ack_timeout_seconds: float = 15.0  # how long a checkpoint waits for the IDE's set_blob acks
    # After a restart, how long a resumed run waits for tool results the IDE still owes it.
    recovery_wait_seconds: float = 10.0
    # Other users of the machine: when set, every request must carry this token (README "Security").
    auth_token: str = ""
    auth_token_env: str = ""  # or the name of the environment variable holding it
    body_read_timeout_seconds: float = 30.0  # a request body still incomplete then: 408, connection closed
    header_read_timeout_seconds: float = 10.0  # a request head still incomplete then: connection closed
    max_header_bytes: int = 64 * 1024
    # Requests still waiting for their body or their transport (junk cannot exhaust them: the
    # oldest is evicted first); one connection may hold at most max_pending_per_connection of them.
    max_pending_requests: int = 1024
    max_pending_per_connection: int = 64


class UpstreamConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    base_url: str = DEFAULT_UPSTREAM
    timeout_seconds: float = 300.0


class ProxyConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The local intercepting proxy the IDE is pointed at (TLS terminated only for *.cursor.sh)."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 8788
    # Where tunnels to hosts we do not intercept go on to (a corporate proxy). Empty: the
    # http.proxy that `cursor-byok cursor enable` replaced in Cursor's settings, if any.
    upstream_proxy: str = ""


class RetentionConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """How many days records that are not conversation history are kept (0: forever). History
    (conversations, their events and checkpoints) goes only by `conversations delete|prune`."""

    runs_days: float = 180.0  # finished run records (outcome, error): `conversations show` lists them
    traces_days: float = 30.0  # request traces
    usage_days: float = 400.0  # each run's usage row (tokens, outcome, phase timings)
    calls_days: float = 30.0  # provider call records (the dashboard's calls; bodies in detailed mode)

    def ages_ms(self) -> dict[str, int]:
        """Record kind → age in ms (0: kept forever)."""
        return {f.name.removesuffix("_days"): int(getattr(self, f.name) * 86_400_000) for f in msgspec.structs.fields(self)}


class ModelPrice(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What a model's tokens cost, in USD per million tokens (for the dashboard and `usage`)."""

    input: float = 0.0  # uncached prompt tokens
    output: float = 0.0  # reasoning tokens included
    cache_read: float = 0.0
    cache_write: float = 0.0


class ModelConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    id: str  # the model id Cursor sees and selects
    provider: ProviderKind
    model: str  # the provider's model id
    base_url: str = ""
    api_key_env: str = ""
    api_key_secret: str = ""  # key name in the 0600 secrets file
    display_name: str = ""
    context_window: int = 200_000
    max_output_tokens: int = 32_000
    efforts: list[str] = []  # e.g. ["low", "medium", "high"]; empty: no effort parameter
    default_effort: str = ""
    thinking_budget_tokens: int = 0  # Anthropic extended thinking; 0 = off
    supports_images: bool = True
    extra_headers: dict[str, str] = {}
    extra_params: dict[str, Any] = {}
    request_timeout_seconds: float = 600.0
    idle_timeout_seconds: float = 120.0
    price: ModelPrice | None = None  # none: costs are not shown for this model

    @property
    def label(self) -> str:
        return self.display_name or self.id


class AliasConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A Cursor-hosted model id that runs on one of our models instead (opt-in, one id each)."""

    cursor_model: str  # the hosted model id the IDE sends when the user picks it
    model: str  # the id of one of our [[models]]


class ObservabilityConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What the server records about its provider calls and runs, and how it logs (how long the
    records are kept: [retention] calls_days and usage_days)."""

    enabled: bool = True  # off: no call records, run lines or run metrics
    # Keep each provider call's request and response bodies (redacted of the key; large, so off).
    detailed: bool = False
    log_format: str = "text"  # or "json" (--log-format wins)


class Config(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    upstream: UpstreamConfig = msgspec.field(default_factory=UpstreamConfig)
    proxy: ProxyConfig = msgspec.field(default_factory=ProxyConfig)
    retention: RetentionConfig = msgspec.field(default_factory=RetentionConfig)
    observability: ObservabilityConfig = msgspec.field(default_factory=ObservabilityConfig)
    models: list[ModelConfig] = []
    aliases: list[AliasConfig] = []
    secrets_file: str = ""
    # Where the file was read from (not a TOML key; filled by load()).
    source: str = ""

    def model(self, model_id: str) -> ModelConfig | None:
        """The configured model for a Cursor model id, accepting variant suffixes (`<id>-high`),
        or the model an alias runs a hosted model id on."""
        best: ModelConfig | None = None
        for m in self.models:
            if model_id == m.id:
                return m
            if model_id.startswith(m.id + "-") and (best is None or len(m.id) > len(best.id)):
                best = m
        if best is None:
            target = next((a.model for a in self.aliases if a.cursor_model == model_id), None)
            best = next((m for m in self.models if m.id == target), None) if target is not None else None
        return best

    @property
    def data_path(self) -> Path:
        raw = self.server.data_dir or platformdirs.user_data_dir(APP_NAME)
        return Path(os.path.expanduser(raw))

    @property
    def database_path(self) -> Path:
        return self.data_path / "state.db"


def default_config_path() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def config_path(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get(CONFIG_ENV)
    return Path(env).expanduser() if env else default_config_path()


_TOML_TYPES = {
    "object": "table",
    "array": "array",
    "str": "string",
    "int": "integer",
    "float": "float",
    "bool": "boolean",
}


def _toml_type(name: str) -> str:
    return _TOML_TYPES.get(name, name)


def _describe(err: msgspec.ValidationError, prefix: str = "") -> str:
    """msgspec's message as `<toml key>: <problem>`, e.g. `server.port: expected integer, got string`."""
    text = str(err)
    msg, _, where = text.partition(" - at `")
    path = where.rstrip("`").removeprefix("$") if where else ""
    key = (prefix + path).lstrip(".")
    if m := re.fullmatch(r"Object missing required field `(.+)`", msg):
        key, msg = (f"{key}.{m.group(1)}" if key else m.group(1)), "missing required key"
    elif m := re.fullmatch(r"Object contains unknown field `(.+)`", msg):
        key, msg = (f"{key}.{m.group(1)}" if key else m.group(1)), "unknown key"
    elif m := re.fullmatch(r"Expected `(\w+)`, got `(\w+)`", msg):
        msg = f"expected {_toml_type(m.group(1))}, got {_toml_type(m.group(2))}"
    elif m := re.fullmatch(r"Invalid enum value (.+)", msg):
        if key.endswith(".provider"):
            allowed = ", ".join(k.value for k in ProviderKind)
            msg = f"unknown provider kind {m.group(1)} (expected one of: {allowed})"
        else:
            msg = f"invalid value {m.group(1)}"
    return f"{key}: {msg}" if key else msg


def _struct_type(tp: Any) -> type[msgspec.Struct] | None:
    return tp if isinstance(tp, type) and issubclass(tp, msgspec.Struct) else None


def _shape_problems(value: Any, struct: type[msgspec.Struct], where: str) -> Iterator[str]:
    """Every unknown key, missing key and wrong type in one table (msgspec stops at the first)."""
    if not isinstance(value, dict):
        yield f"{where}: expected table, got {_toml_type(type(value).__name__)}"
        return
    fields = {f.encode_name: f for f in msgspec.structs.fields(struct)}
    for key, item in value.items():
        field = fields.get(key)
        name = f"{where}.{key}" if where else key
        if field is None or (not where and key == "source"):
            yield f"{name}: unknown key"
            continue
        nested = _struct_type(field.type)
        element = _struct_type(typing.get_args(field.type)[0]) if typing.get_origin(field.type) is list else None
        if nested is not None:
            yield from _shape_problems(item, nested, name)
        elif element is not None and isinstance(item, list):
            for i, entry in enumerate(item):
                yield from _shape_problems(entry, element, f"{name}[{i}]")
        else:
            try:
                msgspec.convert(item, field.type, strict=True)
            except msgspec.ValidationError as exc:
                yield _describe(exc, name)
    for field in fields.values():
        if field.required and field.encode_name not in value:
            yield f"{where}.{field.encode_name}: missing required key" if where else f"{field.encode_name}: missing required key"


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _looks_like_a_key(env_name: str) -> bool:
    """True when an `*_env` value is not a variable name but, by its shape, the secret itself."""
    if not _ENV_NAME.fullmatch(env_name):
        return True
    # A long token of lower-case letters and digits is a key that happens to be word characters only.
    return len(env_name) >= 24 and any(c.islower() for c in env_name) and any(c.isdigit() for c in env_name)


def url_problem(url: str, schemes: tuple[str, ...] = ("http", "https")) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme not in schemes or not parts.hostname:
        return f"not a URL: expected {' or '.join(f'{s}://host[:port]/…' for s in schemes)}"
    return None


def _same_address(a: str, b: str) -> bool:
    wildcard = ("", "0.0.0.0", "::")
    return a == b or a in wildcard or b in wildcard


def _meaning_problems(cfg: Config) -> Iterator[str]:
    """What a well-formed config can still get wrong: ids, ranges, URLs, ports, keys, references."""
    seen: set[str] = set()
    for i, m in enumerate(cfg.models):
        at = f"models[{i}]"
        if not m.id:
            yield f"{at}.id: must not be empty"
        elif m.id in seen:
            yield f"{at}.id: duplicate model id {m.id!r}"
        seen.add(m.id)
        if m.api_key_env and m.api_key_secret:
            yield f"{at}: set api_key_env or api_key_secret, not both"
        if m.api_key_env and _looks_like_a_key(m.api_key_env):
            # Never echo it: it is most likely the key itself.
            yield (
                f"{at}.api_key_env: this looks like an API key, not the name of an environment variable: "
                "put the key in the environment (export NAME=...) and write NAME here"
            )
        if m.context_window <= 0 or m.max_output_tokens <= 0:
            yield f"{at}: context_window and max_output_tokens must be > 0"
        if m.base_url and (problem := url_problem(m.base_url)):
            yield f"{at}.base_url: {problem}"
        if m.default_effort and m.efforts and m.default_effort not in m.efforts:
            yield f"{at}.default_effort: {m.default_effort!r} is not one of its efforts ({', '.join(m.efforts)})"
        if m.price is not None and min(msgspec.structs.astuple(m.price)) < 0:
            yield f"{at}.price: prices must be >= 0 (USD per million tokens)"
    yield from _alias_problems(cfg, seen)
    if problem := url_problem(cfg.upstream.base_url):
        yield f"upstream.base_url: {problem}"
    if cfg.proxy.upstream_proxy and (problem := url_problem(cfg.proxy.upstream_proxy, ("http",))):
        yield f"proxy.upstream_proxy: {problem}"
    if not 0 < cfg.server.port < 65536:
        yield "server.port: must be between 1 and 65535"
    yield from _edge_limit_problems(cfg.server)
    for kind in cfg.retention.ages_ms():
        if getattr(cfg.retention, f"{kind}_days") < 0:
            yield f"retention.{kind}_days: must be >= 0 (0 keeps them forever)"
    obs = cfg.observability
    if obs.log_format not in ("text", "json"):
        yield f"observability.log_format: expected \"text\" or \"json\", got {obs.log_format!r}"
    if not 0 <= cfg.proxy.port < 65536:
        yield "proxy.port: must be between 0 and 65535"
    elif cfg.proxy.port == cfg.server.port and _same_address(cfg.proxy.host, cfg.server.host):
        yield f"proxy.port: {cfg.proxy.port} is also server.port: give the proxy another port"


def _alias_problems(cfg: Config, model_ids: set[str]) -> Iterator[str]:
    hosted: set[str] = set()
    for i, alias in enumerate(cfg.aliases):
        at = f"aliases[{i}]"
        if not alias.cursor_model:
            yield f"{at}.cursor_model: must not be empty"
        elif alias.cursor_model in hosted:
            yield f"{at}.cursor_model: {alias.cursor_model!r} is aliased twice"
        elif alias.cursor_model in model_ids:
            yield f"{at}.cursor_model: {alias.cursor_model!r} is one of your own model ids already"
        hosted.add(alias.cursor_model)
        if alias.model not in model_ids:
            known = ", ".join(sorted(model_ids)) or "none configured"
            yield f"{at}.model: no [[models]] entry has id {alias.model!r} (model ids: {known})"


def parse(data: dict[str, Any], source: str = "<memory>") -> Config:
    """Validate a decoded TOML document. Raises ConfigError naming every bad key."""
    problems = list(_shape_problems(data, Config, ""))
    if not problems:
        cfg = msgspec.convert(data, Config, strict=True)
        problems = list(_meaning_problems(cfg))
    if problems:
        lines = [f"{source}: {p}" for p in problems]
        raise ConfigError(lines[0], lines)
    cfg.source = source
    return cfg


def _edge_limit_problems(server: ServerConfig) -> Iterator[str]:
    if server.auth_token and server.auth_token_env:
        yield "server: set auth_token or auth_token_env, not both"
    if server.auth_token_env and _looks_like_a_key(server.auth_token_env):  # never echoed: it is likely the token
        yield "server.auth_token_env: this looks like a token, not the name of an environment variable"
    for key in (
        "body_read_timeout_seconds", "header_read_timeout_seconds", "max_header_bytes", "max_pending_requests",
        "max_pending_per_connection", "recovery_wait_seconds",
    ):
        if getattr(server, key) <= 0:
            yield f"server.{key}: must be > 0"


def load(path: str | Path | None = None, *, must_exist: bool = False) -> Config:
    """Load the config file (explicit path, $CURSOR_BYOK_CONFIG, or the user config dir)."""
    p = config_path(str(path) if path else None)
    if not p.exists():
        if must_exist or path or os.environ.get(CONFIG_ENV):
            raise ConfigError(f"{p}: config file not found")
        return parse({}, source="<defaults>")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror}") from None
    return parse(data, source=str(p))


def _model_key(cfg: Config, model: ModelConfig, field: str) -> str:
    for i, m in enumerate(cfg.models):
        if m is model:
            return f"models[{i}].{field}"
    return f"model {model.id!r} {field}"


def secrets_path(cfg: Config) -> Path:
    """The 0600 secrets file: `secrets_file`, else `secrets.toml` in the user config dir."""
    return Path(cfg.secrets_file or default_config_path().with_name("secrets.toml")).expanduser()


# A secrets file is read again only when it changed (every run start resolves its model's key): by
# its identity, size and times, unless it changed so recently that a same-size rewrite within the
# file system's clock grain could share those (then it is read every time until it is older).
_SECRETS_SETTLED_NS = 2_000_000_000
_secrets_read: dict[Path, tuple[tuple[int, ...], dict[str, str]]] = {}


def load_secrets(cfg: Config) -> dict[str, str]:
    p = secrets_path(cfg)
    try:
        st = p.stat()
    except OSError as exc:
        raise ConfigError(f"{cfg.source}: secrets_file: {p}: cannot read: {exc.strerror}") from None
    if os.name == "posix" and stat.S_IMODE(st.st_mode) & 0o077:
        raise ConfigError(f"{cfg.source}: secrets_file: {p}: permissions must be 0600 (run: chmod 600 {p})")
    version = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    known = _secrets_read.get(p)
    if known is not None and known[0] == version:
        return dict(known[1])
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{cfg.source}: secrets_file: {p}: unreadable: {exc.__class__.__name__}") from None
    secrets = {k: v for k, v in data.items() if isinstance(v, str)}
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > _SECRETS_SETTLED_NS:
        _secrets_read[p] = (version, secrets)
    else:
        _secrets_read.pop(p, None)
    return dict(secrets)


def resolve_api_key(cfg: Config, model: ModelConfig) -> str:
    """The model's key from its env var or the secrets file; '' when the model needs none."""
    if model.api_key_env:
        key = os.environ.get(model.api_key_env, "")
        if not key:
            where = _model_key(cfg, model, "api_key_env")
            raise ConfigError(
                f"{cfg.source}: {where}: environment variable {model.api_key_env} is not set (model {model.id!r})"
            )
        return key
    if model.api_key_secret:
        secrets = load_secrets(cfg)
        if model.api_key_secret not in secrets:
            where = _model_key(cfg, model, "api_key_secret")
            raise ConfigError(f"{cfg.source}: {where}: {model.api_key_secret!r} not in the secrets file")
        return secrets[model.api_key_secret]
    return ""


_TABLE_HEADER = re.compile(r"^[ \t]*\[\[?[^\]\n]*\]\]?[ \t]*(?:#.*)?$", re.M)
_PROXY_HEADER = re.compile(r"^[ \t]*\[[ \t]*proxy[ \t]*\][ \t]*(?:#.*)?$", re.M)
_ENABLED_LINE = re.compile(r"^([ \t]*enabled[ \t]*=[ \t]*)false\b", re.M)


def enable_proxy_in_file(path: Path) -> bool:
    """Turn the intercepting proxy on in the config file (`[proxy] enabled = true`) with a minimal
    textual edit that keeps comments and layout; creates the file if there is none. Returns False
    when it was on already. Raises ConfigError, saying what to do by hand, when the file's
    [proxy] is not a plain table this edit can safely change."""
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    cfg = parse(tomllib.loads(text), str(path)) if text else None
    if cfg is not None and cfg.proxy.enabled:
        return False
    header = _PROXY_HEADER.search(text)
    if header is None:
        new = text + ("\n" if text and not text.endswith("\n") else "") + ("\n" if text else "") + "[proxy]\nenabled = true\n"
    else:
        nxt = _TABLE_HEADER.search(text, header.end())
        end = nxt.start() if nxt else len(text)
        section = text[header.end() : end]
        if _ENABLED_LINE.search(section):
            section = _ENABLED_LINE.sub(r"\1true", section, count=1)
        else:
            section = "\nenabled = true" + section
        new = text[: header.end()] + section + text[end:]
    try:
        edited = parse(tomllib.loads(new), str(path))
    except (tomllib.TOMLDecodeError, ConfigError):
        edited = None
    if edited is None or not edited.proxy.enabled:
        raise ConfigError(f"{path}: proxy.enabled: cannot turn it on here; set `enabled = true` under [proxy] yourself")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o644
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(new, encoding="utf-8")
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write: {exc.strerror} (set `enabled = true` under [proxy] yourself)") from None
    return True
