"""The configuration's shape: the msgspec Structs a config file is validated into, their defaults,
and the error every configuration problem is reported with."""
from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import platformdirs

APP_NAME = "cursor-byok"
CONFIG_ENV = "CURSOR_BYOK_CONFIG"
DEFAULT_UPSTREAM = "https://api2.cursor.sh"
LOG_LEVELS = ("debug", "info", "warning", "error")
TEAM_CALLS_DAYS = 32  # a calendar month and a day: what a team server keeps of its provider call records at least


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
    # After a turn the stream stays open this long for a follow-up on the same request id (0: it
    # ends with the settled checkpoint; Cursor's SDK marks a run finished only when its stream ends).
    continuation_window_seconds: float = 0.0
    # A run whose stream is gone (RunSSE closed, Run reset) and not read again within this long
    # ends as cancelled; a new run request for the conversation takes over before that.
    reattach_grace_seconds: float = 3.0
    blob_ack_timeout_seconds: float = 15.0  # how long a checkpoint waits for the IDE's set_blob acks
    # After a restart, how long a resumed run waits for tool results the IDE still owes it.
    recovery_wait_seconds: float = 10.0
    # Other users of the machine: when set, every request must carry this token (README "Security").
    auth_token: str = ""
    auth_token_env: str = ""  # or the name of the environment variable holding it
    # Served beyond loopback (a team server): TLS from these PEM files (both or neither), and the
    # names other machines reach it by, the only Host and Origin names served besides loopback.
    tls_cert: str = ""
    tls_key: str = ""
    public_names: list[str] = []
    body_read_timeout_seconds: float = 30.0  # a request body still incomplete then: 408, connection closed
    header_read_timeout_seconds: float = 10.0  # a request head still incomplete then: connection closed
    # A connection (on the server's or the proxy's port) that sent no byte this long is closed.
    first_byte_timeout_seconds: float = 10.0
    # A streamed-through body (passthrough, both ports) must be whole within this, however it trickles.
    body_deadline_seconds: float = 300.0
    # Open connections per port (fewer when the open-file limit is low: a third of it); past it
    # the oldest idle ones close first, those that gave the auth token last.
    max_connections: int = 4096
    # Bytes of request bodies still being read, over all requests; past it the oldest is dropped.
    max_pending_body_bytes: int = 64 * 1024 * 1024
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
    calls_days: float = 30.0  # provider call records (the dashboard's calls; bodies in detailed mode; a team server: >= 32)

    def ages_ms(self) -> dict[str, int]:
        """Record kind → age in ms (0: kept forever)."""
        return {f.name.removesuffix("_days"): int(getattr(self, f.name) * 86_400_000) for f in msgspec.structs.fields(self)}


class StoreConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Where conversations and records are kept."""

    # Empty: the embedded SQLite database in the data dir. "postgresql://user@host/db": a PostgreSQL
    # database several servers may share (the team server; needs `pip install 'cursor-byok[team]'`).
    # A password is better given by libpq's PGPASSWORD or ~/.pgpass than written here.
    url: str = ""


class ModelPrice(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What a model's tokens cost, in USD per million tokens (for the dashboard and `usage`). An
    unset price costs nothing and is shown as unset (`-`), never as a price of 0."""

    input: float | None = None  # uncached prompt tokens
    output: float | None = None  # reasoning tokens included
    cache_read: float | None = None
    cache_write: float | None = None


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
    request_timeout_seconds: float = 600.0  # the response head and its first event, together
    idle_timeout_seconds: float = 120.0  # between two events of a response
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
    log_level: str = ""  # debug | info | warning | error; empty: --log-level (default info). SIGHUP applies it


class ClusterConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Several instances on one PostgreSQL database ([store] url); the embedded store ignores it."""

    # A conversation's owner renews its lease a few times within this; an owner that stops (killed,
    # cut off from the database) has its conversations taken over by another instance after it.
    lease_seconds: float = 15.0


class TeamConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A team server (docs/team.md): every request but the health probe carries a developer's token
    (`cursor-byok users add`), and each developer's usage, cost and monthly budget are kept apart."""

    enabled: bool = False
    # USD a developer may spend per calendar month (UTC), priced as `usage` prices it; 0: no limit.
    # `cursor-byok users budget NAME USD` sets one developer's own.
    monthly_budget_usd: float = 0.0
    # How often each instance rereads the developers (revocations made elsewhere take effect within
    # this; the instance whose data dir `users` ran on is told at once).
    refresh_seconds: float = 2.0


class Config(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    upstream: UpstreamConfig = msgspec.field(default_factory=UpstreamConfig)
    proxy: ProxyConfig = msgspec.field(default_factory=ProxyConfig)
    retention: RetentionConfig = msgspec.field(default_factory=RetentionConfig)
    observability: ObservabilityConfig = msgspec.field(default_factory=ObservabilityConfig)
    cluster: ClusterConfig = msgspec.field(default_factory=ClusterConfig)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    team: TeamConfig = msgspec.field(default_factory=TeamConfig)
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

    def retention_ages_ms(self) -> dict[str, int]:
        """Record kind → age in ms (0: kept forever), as the server applies them: a team server keeps
        provider call records at least TEAM_CALLS_DAYS, since a month's spending is counted from them."""
        ages = self.retention.ages_ms()
        if self.team.enabled and 0 < ages["calls"] < TEAM_CALLS_DAYS * 86_400_000:
            ages["calls"] = TEAM_CALLS_DAYS * 86_400_000
        return ages

    @property
    def data_path(self) -> Path:
        raw = self.server.data_dir or platformdirs.user_data_dir(APP_NAME)
        return Path(os.path.expanduser(raw))

    @property
    def database_path(self) -> Path:
        return self.data_path / "state.db"

    @property
    def embedded_store(self) -> bool:
        """The store is the SQLite file in the data dir (no [store] url)."""
        return not self.store.url

    @property
    def store_location(self) -> str | Path:
        """What `Store.open` opens: the [store] url, else the SQLite file."""
        return self.store.url or self.database_path
