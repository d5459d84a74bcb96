"""Point Cursor at our proxy through its User/settings.json, and put everything back afterwards.

`enable` sets four keys and saves the user's previous values (raw text, so formatting survives)
in a backup file in our data dir, with the values it set; `disable` restores them exactly and
removes keys that did not exist before, but not over a value the user changed in between (unless
forced). Every write is a minimal textual edit, written atomically, keeping the file mode.
"""
from __future__ import annotations

import contextlib
import enum
import json
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec

from . import jsonc

BACKUP_FILE_NAME = "cursor-settings-backup.json"
BACKUP_VERSION = 2  # 2 added the values `enable` set ("applied"); version 1 files still load
PROXY_KEY = "http.proxy"
PROXY_SUPPORT_KEY = "http.proxySupport"
DISABLE_HTTP2_KEY = "cursor.general.disableHttp2"
SYSTEM_CERTS_KEY = "http.experimental.systemCertificatesV2"
MANAGED_KEYS = (PROXY_KEY, PROXY_SUPPORT_KEY, DISABLE_HTTP2_KEY, SYSTEM_CERTS_KEY)
PROXY_SUPPORT_VALUES = ("override", "on")
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


class SettingsError(Exception):
    """A settings file we refuse to touch, or a backup that does not fit; one line, names the file."""


class IntegrationState(str, enum.Enum):
    ENABLED = "enabled"  # all four keys hold our values
    DISABLED = "disabled"  # none of our values are set
    PARTIAL = "partial"  # some are: edited by hand, or a different proxy URL


class SettingsStatus(msgspec.Struct, frozen=True):
    path: Path
    exists: bool
    state: IntegrationState
    values: Mapping[str, Any]  # current values of the managed keys that are present
    backup_present: bool
    warnings: tuple[str, ...] = ()

    @property
    def http2(self) -> bool:
        """Cursor may use HTTP/2 (its agent then runs as one `Run` stream), else HTTP/1.1 only
        (RunSSE + BidiAppend)."""
        return self.values.get(DISABLE_HTTP2_KEY) is not True


class _Backup(msgspec.Struct):
    settings_path: str
    origin: str  # "existing" | "created" (file did not exist) | "blank" (file was whitespace only)
    blank_text: str = ""  # the original whitespace of a blank file
    empty_inner: str | None = None  # text between the braces of an originally empty object
    previous: dict[str, str | None] = msgspec.field(default_factory=dict)  # key -> raw value text or None
    applied: dict[str, Any] = msgspec.field(default_factory=dict)  # key -> the value `enable` set

    def to_json(self) -> dict[str, Any]:
        return {
            "version": BACKUP_VERSION,
            "settings_path": self.settings_path,
            "origin": self.origin,
            "blank_text": self.blank_text,
            "empty_inner": self.empty_inner,
            "keys": [{"key": k, "previous": v} for k, v in self.previous.items()],
            "applied": self.applied,
        }

    @classmethod
    def from_json(cls, data: Any, where: Path) -> _Backup:
        try:
            if data["version"] not in (1, BACKUP_VERSION):
                raise SettingsError(f"{where}: unsupported backup version {data['version']!r}")
            previous = {str(e["key"]): e["previous"] for e in data["keys"]}
            if any(v is not None and not isinstance(v, str) for v in previous.values()):
                raise TypeError("previous values must be strings or null")
            applied = data.get("applied", {})
            if not isinstance(applied, dict):
                raise TypeError("applied must be an object")
            return cls(
                settings_path=str(data["settings_path"]),
                origin=str(data["origin"]),
                blank_text=str(data.get("blank_text", "")),
                empty_inner=data.get("empty_inner"),
                previous=previous,
                applied=applied,
            )
        except (KeyError, TypeError) as exc:
            raise SettingsError(f"{where}: malformed backup ({exc})") from None


def default_settings_path(
    platform: str | None = None, environ: Mapping[str, str] | None = None, home: Path | None = None
) -> Path:
    """Where Cursor keeps the user's settings.json on this platform."""
    platform = platform or sys.platform
    env = os.environ if environ is None else environ
    home = home or Path.home()
    if platform == "darwin":
        base = home / "Library" / "Application Support"
    elif platform == "win32":
        base = Path(env["APPDATA"]) if env.get("APPDATA") else home / "AppData" / "Roaming"
    else:
        base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    return base / "Cursor" / "User" / "settings.json"


def desired_values(proxy_url: str, proxy_support: str = "override", *, http2: bool = False) -> dict[str, Any]:
    parts = urlsplit(proxy_url)
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        shown = parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl() if "@" in parts.netloc else proxy_url
        raise SettingsError(f"proxy URL must look like http://127.0.0.1:8788, got {shown!r}")
    if proxy_support not in PROXY_SUPPORT_VALUES:
        raise SettingsError(f"http.proxySupport must be one of {', '.join(PROXY_SUPPORT_VALUES)}")
    wanted: dict[str, Any] = {
        PROXY_KEY: proxy_url,
        PROXY_SUPPORT_KEY: proxy_support,
        # HTTP/1.1 (RunSSE + BidiAppend) unless the user opts in to HTTP/2 (the `Run` stream).
        DISABLE_HTTP2_KEY: True,
        # Lets Cursor's Node side trust our CA from the OS store.
        SYSTEM_CERTS_KEY: True,
    }
    if http2:
        del wanted[DISABLE_HTTP2_KEY]
    return wanted


def is_loopback_proxy(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and (parts.hostname or "") in _LOOPBACK_HOSTS


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # True == 1 in Python, not in settings


def _encode(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _read_backup(path: Path) -> _Backup | None:
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        raise SettingsError(f"{path}: not JSON; fix or delete it") from None
    return _Backup.from_json(data, path)


class EnableRecord(msgspec.Struct, frozen=True):
    """What a standing `enable` remembers: which settings file it edited, and the http.proxy value it
    replaced there (a corporate proxy Cursor used before), if that was a string."""

    settings_path: Path
    replaced_proxy: str | None


def enable_record(backup_path: str | Path) -> EnableRecord | None:
    """The record of the `enable` in force, None when there is none (or the backup is unreadable:
    `status`, `enable` and `disable` report that)."""
    try:
        backup = _read_backup(Path(backup_path).expanduser())
    except SettingsError:
        return None
    if backup is None:
        return None
    raw = backup.previous.get(PROXY_KEY)
    try:
        replaced = jsonc.loads(raw) if raw is not None else None
    except jsonc.JsoncError:
        replaced = None
    return EnableRecord(Path(backup.settings_path), replaced if isinstance(replaced, str) and replaced else None)


class CursorSettings:
    """One Cursor settings.json plus the backup that remembers what we changed in it."""

    def __init__(self, settings_path: str | Path, backup_path: str | Path) -> None:
        self.path = Path(settings_path).expanduser()
        self.backup_path = Path(backup_path).expanduser()
        self._private = False  # set by `enable`: the proxy URL it writes carries credentials

    # ---- reading --------------------------------------------------------------------------
    def _target(self) -> Path:
        # Follow a symlinked settings.json (dotfile managers) so we edit the real file in place.
        return self.path.resolve() if self.path.is_symlink() else self.path

    def _read(self) -> str | None:
        try:
            data = self._target().read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SettingsError(f"{self.path}: cannot read: {exc.strerror}") from None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise SettingsError(f"{self.path}: not UTF-8 text; left untouched") from None

    def _parse(self, text: str) -> jsonc.TopLevel:
        try:
            return jsonc.parse_top_level(text)
        except jsonc.JsoncError as exc:
            raise SettingsError(f"{self.path}: cannot parse ({exc}); left untouched") from None

    def _current_values(self, text: str, doc: jsonc.TopLevel) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for key in MANAGED_KEYS:
            found = doc.find(key)
            if found:
                m = doc.members[found[-1]]
                values[key] = jsonc.loads(text[m.value_start : m.value_end])
        return values

    def _load_backup(self) -> _Backup | None:
        return _read_backup(self.backup_path)

    def status(self, proxy_url: str | None = None) -> SettingsStatus:
        text = self._read()
        backup_present = self.backup_path.exists()
        if text is None:
            return SettingsStatus(self.path, False, IntegrationState.DISABLED, {}, backup_present)
        doc = self._parse(text) if text.strip() else None
        values = self._current_values(text, doc) if doc is not None else {}
        current_proxy = values.get(PROXY_KEY)
        proxy_ok = current_proxy == proxy_url if proxy_url is not None else is_loopback_proxy(current_proxy)
        backup = self._load_backup() if backup_present else None
        http2_chosen = backup is not None and DISABLE_HTTP2_KEY not in backup.applied
        matches = (
            proxy_ok,
            values.get(PROXY_SUPPORT_KEY) in PROXY_SUPPORT_VALUES,
            values.get(DISABLE_HTTP2_KEY) is True or http2_chosen,
            values.get(SYSTEM_CERTS_KEY) is True,
        )
        if all(matches):
            state = IntegrationState.ENABLED
        elif proxy_ok or backup_present or is_loopback_proxy(current_proxy):
            state = IntegrationState.PARTIAL
        else:
            state = IntegrationState.DISABLED
        warnings: list[str] = []
        if doc is not None and doc.find("http.noProxy"):
            no_proxy = jsonc.loads(jsonc.value_text(text, "http.noProxy") or "null")
            if isinstance(no_proxy, list) and any("cursor" in str(h) for h in no_proxy):
                warnings.append("http.noProxy lists a Cursor host: Cursor will bypass the proxy for it")
        if values.get("http.proxyStrictSSL") is False:
            warnings.append("http.proxyStrictSSL is false")
        return SettingsStatus(self.path, True, state, values, backup_present, tuple(warnings))

    # ---- writing --------------------------------------------------------------------------
    def enable(self, proxy_url: str, *, proxy_support: str = "override", create_user_dir: bool = False, http2: bool = False) -> list[str]:
        """Set our keys; returns the keys whose value changed. Safe to run again (keeps the first backup).
        Refuses where the settings file's directory does not exist (Cursor not installed for this
        user?) unless `create_user_dir`. With `http2` Cursor's own disableHttp2 is left as the user
        had it (restored if an earlier `enable` set it)."""
        wanted = desired_values(proxy_url, proxy_support, http2=http2)
        # Credentials in the URL (the server's auth token): the settings and the backup are kept private.
        self._private = urlsplit(proxy_url).password is not None
        text = self._read()
        backup = self._load_backup()
        if backup is not None and Path(backup.settings_path) != self.path:
            raise SettingsError(
                f"{self.backup_path}: holds a backup of {backup.settings_path}; "
                "run `cursor-byok cursor disable` for that file first"
            )
        if not create_user_dir and not self._target().parent.is_dir():
            raise SettingsError(
                f"{self.path.parent} does not exist: is Cursor installed for this user? "
                "Pass --settings PATH for another location, or --force to create it"
            )
        if text is None:
            origin, blank, text = "created", "", "{}"
        elif text.strip() == "":
            origin, blank, text = "blank", text, "{}"
        else:
            origin, blank = "existing", ""
        doc = self._parse(text)
        if backup is None:
            empty_inner = text[doc.open_brace + 1 : doc.close_brace] if not doc.members else None
            previous = {key: jsonc.value_text(text, key) for key in MANAGED_KEYS}
            backup = _Backup(str(self.path), origin, blank, empty_inner, previous)
        if backup.applied != wanted:
            backup.applied = wanted
            self._write_backup(backup)
        new_text = text
        changed: list[str] = []
        for key, value in wanted.items():
            current = jsonc.value_text(new_text, key)
            if current is not None and _same(jsonc.loads(current), value):
                continue
            new_text = jsonc.set_value(new_text, key, _encode(value))
            changed.append(key)
        if http2:
            previous = backup.previous.get(DISABLE_HTTP2_KEY)
            current = jsonc.value_text(new_text, DISABLE_HTTP2_KEY)
            if current != previous:
                new_text = jsonc.remove(new_text, DISABLE_HTTP2_KEY) if previous is None else jsonc.set_value(new_text, DISABLE_HTTP2_KEY, previous)
                changed.append(DISABLE_HTTP2_KEY)
        if changed or origin != "existing":
            self._write(new_text)
        return changed

    def disable(self, *, force: bool = False) -> list[str]:
        """Restore the values saved by `enable` (removing keys that did not exist); returns touched keys.
        A key the user changed since `enable` is not overwritten unless `force`: SettingsError names it.

        Without a backup, only a loopback `http.proxy` (ours, by all signs) and its companions go.
        """
        backup = self._load_backup()
        text = self._read()
        if backup is None:
            if text is None or not text.strip():
                return []
            doc = self._parse(text)
            if not is_loopback_proxy(self._current_values(text, doc).get(PROXY_KEY)):
                return []
            touched = [k for k in MANAGED_KEYS if doc.find(k)]
            for key in reversed(MANAGED_KEYS):
                text = jsonc.remove(text, key)
            self._write(text)
            return touched
        if Path(backup.settings_path) != self.path:
            raise SettingsError(
                f"{self.backup_path}: holds a backup of {backup.settings_path}, not {self.path}"
            )
        if text is None:  # the file went away meanwhile: nothing of ours is left in it
            self.backup_path.unlink(missing_ok=True)
            return []
        doc = self._parse(text)
        if not force:
            current = self._current_values(text, doc)
            changed = [
                key for key, value in backup.applied.items()
                if key in backup.previous and (key not in current or not _same(current[key], value))
            ]
            if changed:
                # Values are not shown: a proxy URL may carry credentials.
                raise SettingsError(
                    f"{self.path}: {', '.join(changed)} changed since `cursor-byok cursor enable`; "
                    "left untouched (`cursor-byok cursor disable --force` restores the saved values anyway)"
                )
        touched: list[str] = []
        for key in reversed(list(backup.previous)):
            before = text
            raw = backup.previous[key]
            text = jsonc.remove(text, key) if raw is None else jsonc.set_value(text, key, raw)
            if text != before:
                touched.append(key)
        doc = self._parse(text)
        inner = text[doc.open_brace + 1 : doc.close_brace]
        if not doc.members and inner.strip() == "" and backup.empty_inner is not None:
            text = text[: doc.open_brace + 1] + backup.empty_inner + text[doc.close_brace :]
        if backup.origin in ("created", "blank") and text.strip() == "{}":
            if backup.origin == "created":
                self._target().unlink(missing_ok=True)
            else:
                self._write(backup.blank_text)
        else:
            self._write(text)
        self.backup_path.unlink(missing_ok=True)
        return list(reversed(touched))

    def _write_backup(self, backup: _Backup) -> None:
        self.backup_path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.backup_path, json.dumps(backup.to_json(), indent=2).encode("utf-8"), default_mode=0o600, private=self._private)

    def _write(self, text: str) -> None:
        target = self._target()
        target.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(target, text.encode("utf-8"), private=self._private)


def _atomic_write(path: Path, data: bytes, default_mode: int = 0o644, *, private: bool = False) -> None:
    """Temp file in the same directory, fsync, rename over; the file keeps its mode (less group and
    other access when `private`)."""
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = default_mode
    if private:
        mode &= 0o7700
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if hasattr(os, "O_DIRECTORY"):
        with contextlib.suppress(OSError):
            dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
