"""Configuration: one TOML file, validated into msgspec Structs; secrets only by env var or 0600 file.

The keys in ARCHITECTURE.md's public contract are stable; unknown keys and wrong types are errors
that name the key.
"""
from __future__ import annotations

import enum
import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

import msgspec
import platformdirs

APP_NAME = "cursor-byok"
CONFIG_ENV = "CURSOR_BYOK_CONFIG"
DEFAULT_UPSTREAM = "https://api2.cursor.sh"


class ConfigError(Exception):
    """A configuration problem, worded as one line that names the bad key or file."""


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
    # After a turn the stream stays open this long for a follow-up on the same request id.
    continuation_window_seconds: float = 2.0
    blob_ack_timeout_seconds: float = 15.0  # how long a checkpoint waits for the IDE's set_blob acks
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

    @property
    def label(self) -> str:
        return self.display_name or self.id


class Config(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    upstream: UpstreamConfig = msgspec.field(default_factory=UpstreamConfig)
    proxy: ProxyConfig = msgspec.field(default_factory=ProxyConfig)
    models: list[ModelConfig] = []
    secrets_file: str = ""
    # Where the file was read from (not a TOML key; filled by load()).
    source: str = ""

    def model(self, model_id: str) -> ModelConfig | None:
        """The configured model for a Cursor model id, accepting variant suffixes (`<id>-high`)."""
        best: ModelConfig | None = None
        for m in self.models:
            if model_id == m.id:
                return m
            if model_id.startswith(m.id + "-") and (best is None or len(m.id) > len(best.id)):
                best = m
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


def _describe(err: msgspec.ValidationError) -> str:
    """msgspec's message as `<toml key>: <problem>`, e.g. `server.port: expected integer, got string`."""
    text = str(err)
    msg, _, where = text.partition(" - at `")
    key = where.rstrip("`").removeprefix("$").lstrip(".") if where else ""
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


def parse(data: dict[str, Any], source: str = "<memory>") -> Config:
    """Validate a decoded TOML document. Raises ConfigError naming the bad key."""
    if "source" in data:
        raise ConfigError(f"{source}: source: unknown key")
    try:
        cfg = msgspec.convert(data, Config, strict=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{source}: {_describe(exc)}") from None
    seen: set[str] = set()
    for i, m in enumerate(cfg.models):
        if not m.id:
            raise ConfigError(f"{source}: models[{i}].id: must not be empty")
        if m.id in seen:
            raise ConfigError(f"{source}: models[{i}].id: duplicate model id {m.id!r}")
        seen.add(m.id)
        if m.api_key_env and m.api_key_secret:
            raise ConfigError(f"{source}: models[{i}]: set api_key_env or api_key_secret, not both")
        if m.context_window <= 0 or m.max_output_tokens <= 0:
            raise ConfigError(f"{source}: models[{i}]: context_window and max_output_tokens must be > 0")
    if not 0 < cfg.server.port < 65536:
        raise ConfigError(f"{source}: server.port: must be between 1 and 65535")
    _check_edge_limits(cfg.server, source)
    if not 0 <= cfg.proxy.port < 65536:
        raise ConfigError(f"{source}: proxy.port: must be between 0 and 65535")
    cfg.source = source
    return cfg


def _check_edge_limits(server: ServerConfig, source: str) -> None:
    if server.auth_token and server.auth_token_env:
        raise ConfigError(f"{source}: server: set auth_token or auth_token_env, not both")
    for key in ("body_read_timeout_seconds", "header_read_timeout_seconds"):
        if getattr(server, key) <= 0:
            raise ConfigError(f"{source}: server.{key}: must be > 0")
    for key in ("max_header_bytes", "max_pending_requests", "max_pending_per_connection"):
        if getattr(server, key) <= 0:
            raise ConfigError(f"{source}: server.{key}: must be > 0")


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


def _secrets(cfg: Config) -> dict[str, str]:
    raw = cfg.secrets_file or str(default_config_path().with_name("secrets.toml"))
    p = Path(raw).expanduser()
    try:
        st = p.stat()
    except OSError as exc:
        raise ConfigError(f"{cfg.source}: secrets_file: {p}: cannot read: {exc.strerror}") from None
    if os.name == "posix" and stat.S_IMODE(st.st_mode) & 0o077:
        raise ConfigError(f"{cfg.source}: secrets_file: {p}: permissions must be 0600 (run: chmod 600 {p})")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{cfg.source}: secrets_file: {p}: unreadable: {exc.__class__.__name__}") from None
    return {k: v for k, v in data.items() if isinstance(v, str)}


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
        secrets = _secrets(cfg)
        if model.api_key_secret not in secrets:
            where = _model_key(cfg, model, "api_key_secret")
            raise ConfigError(f"{cfg.source}: {where}: {model.api_key_secret!r} not in the secrets file")
        return secrets[model.api_key_secret]
    return ""
