"""The config and secrets files: where they are, reading them (the secrets file only at 0600, read
again only when it changed), a model's API key, and the one edit `cursor enable` makes."""
from __future__ import annotations

import codecs
import os
import re
import stat
import time
import tomllib
from pathlib import Path

import platformdirs

from .checks import parse
from .schema import APP_NAME, CONFIG_ENV, Config, ConfigError, ModelConfig


def default_config_path() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def config_path(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get(CONFIG_ENV)
    return Path(env).expanduser() if env else default_config_path()


_FOREIGN_BOMS = (  # UTF-32 first: its little-endian mark begins with UTF-16's
    (codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"),
)


def read_toml_text(path: Path, what: str = "") -> str:
    """A TOML file's text: UTF-8, with or without a byte order mark. Another encoding is a
    ConfigError naming the file (`what`: the key that names it, e.g. `secrets_file`)."""
    where = f"{what}: {path}" if what else str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror}") from None
    for bom, name in _FOREIGN_BOMS:
        if raw.startswith(bom):
            raise ConfigError(f"{where}: saved as {name} (it starts with a {name} byte order mark): save it as UTF-8")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}): save it as UTF-8"
        ) from None


def load(path: str | Path | None = None, *, must_exist: bool = False) -> Config:
    """Load the config file (explicit path, $CURSOR_BYOK_CONFIG, or the user config dir)."""
    p = config_path(str(path) if path else None)
    if not p.exists():
        if must_exist or path or os.environ.get(CONFIG_ENV):
            raise ConfigError(f"{p}: config file not found")
        return parse({}, source="<defaults>")
    text = read_toml_text(p)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from None
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
    text = read_toml_text(p, f"{cfg.source}: secrets_file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
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
    text = read_toml_text(path) if path.exists() else ""
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
