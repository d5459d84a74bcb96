"""Validation of a decoded config document: its shape (every unknown key, missing key and wrong
type, worded as `<toml key>: <problem>`), then what a well-formed config can still get wrong."""
from __future__ import annotations

import re
import typing
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

import msgspec

from .schema import LOG_LEVELS, Config, ConfigError, ProviderKind, ServerConfig


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
    elif m := re.fullmatch(r"Expected `(\w+)(?: \| null)?`, got `(\w+)`", msg):
        msg = f"expected {_toml_type(m.group(1))}, got {_toml_type(m.group(2))}"
    elif m := re.fullmatch(r"Invalid enum value (.+)", msg):
        if key.endswith(".provider"):
            allowed = [k.value for k in ProviderKind]
            given = m.group(1).strip("'\"")
            msg = f"unknown provider kind {m.group(1)} (expected one of: {', '.join(allowed)}){did_you_mean(given, allowed)}"
        else:
            msg = f"invalid value {m.group(1)}"
    return f"{key}: {msg}" if key else msg


def _struct_type(tp: Any) -> type[msgspec.Struct] | None:
    return tp if isinstance(tp, type) and issubclass(tp, msgspec.Struct) else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean X?)` for the closest of `choices` to a mistyped `word`, else ''."""
    import difflib  # only a config with a mistake needs it

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


class _Shape(msgspec.Struct):
    """What the shape check found: one line per problem, and the keys they are about (the meaning
    checks say nothing more about those)."""

    problems: list[str] = msgspec.field(default_factory=list)
    bad_keys: set[str] = msgspec.field(default_factory=set)

    def add(self, key: str, line: str) -> None:
        self.problems.append(line)
        self.bad_keys.add(key)


# Stand-ins for a required key that is missing or malformed, so the rest of its table is still checked.
_STAND_INS: dict[Any, Any] = {str: "", ProviderKind: ProviderKind.OPENAI_CHAT.value}


def _shape(value: Any, struct: type[msgspec.Struct], where: str, found: _Shape) -> dict[str, Any]:
    """Every unknown key, missing key and wrong type in one table (msgspec stops at the first);
    returns the table with them taken out (a default in their place, or a stand-in for a required
    one), so that the meaning checks can still look at the rest."""
    if not isinstance(value, dict):
        found.add(where, f"{where}: expected table, got {_toml_type(type(value).__name__)}")
        value = {}
    fields = {f.encode_name: f for f in msgspec.structs.fields(struct)}
    clean: dict[str, Any] = {}
    for key, item in value.items():
        field = fields.get(key)
        name = f"{where}.{key}" if where else key
        if field is None or (not where and key == "source"):
            known = [k for k in fields if where or k != "source"]
            found.add(name, f"{name}: unknown key{did_you_mean(key, known)}")
            continue
        nested = _struct_type(field.type)
        element = _struct_type(typing.get_args(field.type)[0]) if typing.get_origin(field.type) is list else None
        if nested is not None:
            clean[key] = _shape(item, nested, name, found)
        elif element is not None and isinstance(item, list):
            clean[key] = [_shape(entry, element, f"{name}[{i}]", found) for i, entry in enumerate(item)]
        else:
            try:
                msgspec.convert(item, field.type, strict=True)
            except msgspec.ValidationError as exc:
                found.add(name, _describe(exc, name))
                if field.required:
                    clean[key] = _STAND_INS.get(field.type, "")
                continue
            clean[key] = item
    for field in fields.values():
        if field.required and field.encode_name not in value:
            name = f"{where}.{field.encode_name}" if where else field.encode_name
            found.add(name, f"{name}: missing required key")
            clean[field.encode_name] = _STAND_INS.get(field.type, "")
    return clean


def _about(problem: str, keys: set[str]) -> bool:
    """Whether a meaning problem is about a key the shape check reported already."""
    key = problem.partition(": ")[0]
    return any(key == bad or key.startswith((bad + ".", bad + "[")) for bad in keys)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _looks_like_a_key(env_name: str) -> bool:
    """True when an `*_env` value is not a variable name but, by its shape, the secret itself."""
    if not _ENV_NAME.fullmatch(env_name):
        return True
    # A long token of lower-case letters and digits is a key that happens to be word characters only.
    return len(env_name) >= 24 and any(c.islower() for c in env_name) and any(c.isdigit() for c in env_name)


# libpq's schemes (the store's own check is `store.is_postgres_url`; the config stays light to import).
STORE_URL_SCHEMES = ("postgresql://", "postgres://")


def store_url_problem(url: str) -> str | None:
    if not url or url.startswith(STORE_URL_SCHEMES):
        return None
    return f"expected a postgresql:// url (or none: the embedded SQLite store), got {url.split(':', 1)[0]!r}"


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
        if m.price is not None and min((p for p in msgspec.structs.astuple(m.price) if p is not None), default=0) < 0:
            yield f"{at}.price: prices must be >= 0 (USD per million tokens)"
    yield from _alias_problems(cfg, seen)
    if problem := url_problem(cfg.upstream.base_url):
        yield f"upstream.base_url: {problem}"
    if cfg.proxy.upstream_proxy and (problem := url_problem(cfg.proxy.upstream_proxy, ("http",))):
        yield f"proxy.upstream_proxy: {problem}"
    if not 0 < cfg.server.port < 65536:
        yield "server.port: must be between 1 and 65535"
    yield from _edge_limit_problems(cfg.server)
    if cfg.cluster.lease_seconds <= 0:
        yield "cluster.lease_seconds: must be > 0"
    for kind in cfg.retention.ages_ms():
        if getattr(cfg.retention, f"{kind}_days") < 0:
            yield f"retention.{kind}_days: must be >= 0 (0 keeps them forever)"
    if problem := store_url_problem(cfg.store.url):
        yield f"store.url: {problem}"
    obs = cfg.observability
    if obs.log_format not in ("text", "json"):
        yield f"observability.log_format: expected \"text\" or \"json\", got {obs.log_format!r}"
    if obs.log_level not in ("", *LOG_LEVELS):
        yield f"observability.log_level: expected one of {', '.join(LOG_LEVELS)}, got {obs.log_level!r}"
    yield from _team_problems(cfg)
    if not 0 <= cfg.proxy.port < 65536:
        yield "proxy.port: must be between 0 and 65535"
    elif cfg.proxy.port == cfg.server.port and _same_address(cfg.proxy.host, cfg.server.host):
        yield f"proxy.port: {cfg.proxy.port} is also server.port: give the proxy another port"


def _team_problems(cfg: Config) -> Iterator[str]:
    team = cfg.team
    if team.monthly_budget_usd < 0:
        yield "team.monthly_budget_usd: must be >= 0 (0: no limit)"
    if team.refresh_seconds <= 0:
        yield "team.refresh_seconds: must be > 0"
    if team.enabled and not cfg.observability.enabled:
        yield "team.enabled: a team server counts each developer's usage: observability.enabled must stay true"


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
    """Validate a decoded TOML document. Raises ConfigError naming every bad key, in one pass: the
    shape's problems, then what the rest of the document still gets wrong."""
    found = _Shape()
    clean = _shape(data, Config, "", found)
    cfg = msgspec.convert(clean, Config, strict=True)
    problems = found.problems + [p for p in _meaning_problems(cfg) if not _about(p, found.bad_keys)]
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
    if bool(server.tls_cert) != bool(server.tls_key):
        missing = "tls_key" if server.tls_cert else "tls_cert"
        given = "tls_cert" if server.tls_cert else "tls_key"
        yield f"server.{missing}: set it with server.{given} (TLS needs the certificate and its key)"
    for i, name in enumerate(server.public_names):
        if not name or any(c in name for c in "/@ ") or name.count(":") > 1 and not name.startswith("["):
            yield f"server.public_names[{i}]: {name[:80]!r} is not a host name (a name or name:port, no scheme or path)"
    for key in (
        "body_read_timeout_seconds", "header_read_timeout_seconds", "max_header_bytes", "max_pending_requests",
        "max_pending_per_connection", "recovery_wait_seconds", "first_byte_timeout_seconds", "body_deadline_seconds",
        "max_connections", "max_pending_body_bytes", "reattach_grace_seconds",
    ):
        if getattr(server, key) <= 0:
            yield f"server.{key}: must be > 0"
