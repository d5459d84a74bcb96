"""Enabling and disabling the proxy in a real settings.json file on disk."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cursor_byok.cursor_settings import (
    MANAGED_KEYS,
    CursorSettings,
    EnableRecord,
    IntegrationState,
    SettingsError,
    default_settings_path,
    enable_record,
    jsonc,
)

PROXY = "http://127.0.0.1:8788"
EXPECTED = {
    "http.proxy": PROXY,
    "http.proxySupport": "override",
    "cursor.general.disableHttp2": True,
    "http.experimental.systemCertificatesV2": True,
}

USER_FILE = """// My settings — keep this comment
{
    "editor.fontSize": 14, // bigger
    /* the proxy below is mine */
    "workbench.colorTheme": "Solarized {Dark}",
    "terminal.integrated.env.linux": {
        "PATH": "/usr/bin://odd", // nested
    },
    "emoji": "🙂",
}
"""


@pytest.fixture
def paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "Cursor" / "User" / "settings.json", tmp_path / "data" / "cursor-settings-backup.json"


def managed_values(text: str) -> dict:
    data = jsonc.loads(text)
    return {k: data[k] for k in MANAGED_KEYS if k in data}


def test_default_paths_per_platform(tmp_path: Path):
    home = tmp_path
    assert default_settings_path("darwin", {}, home) == home / "Library/Application Support/Cursor/User/settings.json"
    assert default_settings_path("win32", {"APPDATA": str(tmp_path / "R")}, home) == tmp_path / "R/Cursor/User/settings.json"
    assert default_settings_path("linux", {}, home) == home / ".config/Cursor/User/settings.json"
    assert default_settings_path("linux", {"XDG_CONFIG_HOME": str(tmp_path / "x")}, home) == tmp_path / "x/Cursor/User/settings.json"


def test_enable_then_disable_restores_the_exact_bytes(paths):
    settings_path, backup = paths
    settings_path.parent.mkdir(parents=True)
    settings_path.write_text(USER_FILE, encoding="utf-8")
    cs = CursorSettings(settings_path, backup)
    assert cs.status(PROXY).state is IntegrationState.DISABLED

    changed = cs.enable(PROXY)
    assert changed == list(MANAGED_KEYS)
    text = settings_path.read_text(encoding="utf-8")
    assert managed_values(text) == EXPECTED
    assert text.startswith("// My settings — keep this comment\n{\n    \"editor.fontSize\": 14, // bigger\n")
    assert jsonc.loads(text)["terminal.integrated.env.linux"] == {"PATH": "/usr/bin://odd"}
    assert cs.status(PROXY).state is IntegrationState.ENABLED
    assert backup.exists()

    assert cs.disable() == list(MANAGED_KEYS)
    assert settings_path.read_text(encoding="utf-8") == USER_FILE
    assert not backup.exists()
    assert cs.status(PROXY).state is IntegrationState.DISABLED


def test_previous_values_are_restored_verbatim(paths):
    settings_path, backup = paths
    settings_path.parent.mkdir(parents=True)
    original = (
        '{\n  "http.proxy":"http://corp-proxy:3128" /* corp */,\n  "cursor.general.disableHttp2": false,\n'
        '  "http.proxySupport": "fallback"\n}\n'
    )
    settings_path.write_text(original)
    cs = CursorSettings(settings_path, backup)
    cs.enable(PROXY)
    assert managed_values(settings_path.read_text()) == EXPECTED
    assert "/* corp */" in settings_path.read_text()
    cs.disable()
    assert settings_path.read_text() == original


def test_enable_twice_keeps_the_first_backup(paths):
    settings_path, backup = paths
    settings_path.parent.mkdir(parents=True)
    settings_path.write_text(USER_FILE)
    cs = CursorSettings(settings_path, backup)
    cs.enable(PROXY)
    assert cs.enable(PROXY) == []  # already there: nothing changes
    assert cs.enable("http://127.0.0.1:9999") == ["http.proxy"]
    assert cs.status(PROXY).state is IntegrationState.PARTIAL
    cs.disable()
    assert settings_path.read_text() == USER_FILE


def test_missing_file_is_created_and_removed_again(paths):
    settings_path, backup = paths
    settings_path.parent.mkdir(parents=True)
    cs = CursorSettings(settings_path, backup)
    assert not cs.status().exists
    cs.enable(PROXY)
    assert managed_values(settings_path.read_text()) == EXPECTED
    cs.disable()
    assert not settings_path.exists()


def test_enable_refuses_where_cursor_is_not_installed_unless_told(paths):
    settings_path, backup = paths
    cs = CursorSettings(settings_path, backup)
    with pytest.raises(SettingsError, match=r"User does not exist: is Cursor installed for this user\?.*--force"):
        cs.enable(PROXY)
    assert not settings_path.parent.exists() and not backup.exists()
    cs.enable(PROXY, create_user_dir=True)
    assert managed_values(settings_path.read_text()) == EXPECTED


def test_disable_refuses_to_overwrite_a_value_changed_since_enable(paths):
    settings_path, backup = paths
    settings_path.parent.mkdir(parents=True)
    original = '{\n    "http.proxy": "http://corp-proxy:3128",\n}\n'
    settings_path.write_text(original)
    cs = CursorSettings(settings_path, backup)
    cs.enable(PROXY)
    assert enable_record(backup) == EnableRecord(settings_path, "http://corp-proxy:3128")
    changed_by_user = jsonc.set_value(settings_path.read_text(), "http.proxy", '"http://user:secret@other:8080"')
    settings_path.write_text(changed_by_user)
    with pytest.raises(SettingsError) as info:
        cs.disable()
    assert "http.proxy changed since `cursor-byok cursor enable`" in str(info.value) and "--force" in str(info.value)
    assert "secret" not in str(info.value)
    assert settings_path.read_text() == changed_by_user and backup.exists()
    assert cs.disable(force=True) == list(MANAGED_KEYS)
    assert settings_path.read_text() == original and enable_record(backup) is None


def test_a_version_1_backup_still_restores(paths):
    settings_path, backup = paths
    settings_path.parent.mkdir(parents=True)
    settings_path.write_text(USER_FILE)
    cs = CursorSettings(settings_path, backup)
    cs.enable(PROXY)
    data = json.loads(backup.read_text())
    data["version"] = 1
    del data["applied"]
    backup.write_text(json.dumps(data))
    settings_path.write_text(jsonc.set_value(settings_path.read_text(), "http.proxySupport", '"on"'))
    assert cs.disable() == list(MANAGED_KEYS)  # nothing recorded to compare with: restores as before
    assert settings_path.read_text() == USER_FILE


@pytest.mark.parametrize("original", ["{}", "{}\n", "{ }", "{\n}\n", "  \n"])
def test_empty_documents_round_trip(paths, original):
    settings_path, backup = paths
    settings_path.parent.mkdir(parents=True)
    settings_path.write_text(original)
    cs = CursorSettings(settings_path, backup)
    cs.enable(PROXY)
    assert managed_values(settings_path.read_text()) == EXPECTED
    cs.disable()
    assert settings_path.read_text() == original


def test_unparseable_file_is_refused_and_left_untouched(paths):
    settings_path, backup = paths
    settings_path.parent.mkdir(parents=True)
    broken = '{\n  "a": 1\n  "b": 2\n}\n'
    settings_path.write_text(broken)
    before = settings_path.stat()
    cs = CursorSettings(settings_path, backup)
    with pytest.raises(SettingsError, match=r"settings\.json: cannot parse \(line 3, column 3.*left untouched"):
        cs.enable(PROXY)
    assert settings_path.read_text() == broken
    assert settings_path.stat().st_mtime_ns == before.st_mtime_ns
    assert not backup.exists()
    with pytest.raises(SettingsError):
        cs.status()


def test_non_utf8_file_is_refused(paths):
    settings_path, backup = paths
    settings_path.parent.mkdir(parents=True)
    settings_path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(SettingsError, match="not UTF-8"):
        CursorSettings(settings_path, backup).enable(PROXY)
    assert settings_path.read_bytes() == b'{"a": "\xff"}'


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes and symlinks")
def test_file_mode_and_symlinks_are_kept(paths, tmp_path: Path):
    settings_path, backup = paths
    real = tmp_path / "dotfiles" / "cursor-settings.json"
    real.parent.mkdir()
    real.write_text(USER_FILE)
    real.chmod(0o600)
    settings_path.parent.mkdir(parents=True)
    settings_path.symlink_to(real)
    cs = CursorSettings(settings_path, backup)
    cs.enable(PROXY)
    assert settings_path.is_symlink()
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert managed_values(real.read_text()) == EXPECTED
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    cs.disable()
    assert settings_path.is_symlink() and real.read_text() == USER_FILE
    assert [p.name for p in real.parent.iterdir()] == ["cursor-settings.json"]  # no temp files left


def test_disable_without_backup_removes_only_a_loopback_proxy(paths):
    settings_path, backup = paths
    settings_path.parent.mkdir(parents=True)
    corp = '{\n  "http.proxy": "http://corp:3128",\n  "cursor.general.disableHttp2": true\n}'
    settings_path.write_text(corp)
    cs = CursorSettings(settings_path, backup)
    assert cs.disable() == []
    assert settings_path.read_text() == corp
    settings_path.write_text('{\n  "a": 1,\n  "http.proxy": "http://127.0.0.1:8788",\n  "http.proxySupport": "on"\n}')
    assert cs.status().state is IntegrationState.PARTIAL
    assert cs.disable() == ["http.proxy", "http.proxySupport"]
    assert settings_path.read_text() == '{\n  "a": 1\n}'


def test_backup_for_another_file_is_not_applied(paths, tmp_path: Path):
    settings_path, backup = paths
    other = tmp_path / "other.json"
    other.write_text("{}")
    CursorSettings(other, backup).enable(PROXY)
    with pytest.raises(SettingsError, match="holds a backup of"):
        CursorSettings(settings_path, backup).enable(PROXY)


def test_status_warns_about_no_proxy_for_cursor_hosts(paths):
    settings_path, backup = paths
    settings_path.parent.mkdir(parents=True)
    settings_path.write_text('{"http.noProxy": ["*.cursor.sh"]}')
    status = CursorSettings(settings_path, backup).status(PROXY)
    assert any("http.noProxy" in w for w in status.warnings)


# ---- property: any JSONC file survives enable + disable byte for byte ------------------------

GAPS = st.lists(
    st.sampled_from(["", " ", "\n", "\n    ", "\t", "\r\n  ", " // c { } \" //\n", "/* b */", "/* multi\n line */", "\n  // note\n  "]),
    max_size=3,
).map("".join)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
KEYS = st.one_of(st.text(min_size=1, max_size=10), st.sampled_from(list(MANAGED_KEYS) + ["http.noProxy"]))


@st.composite
def jsonc_documents(draw) -> str:
    members = draw(st.lists(st.tuples(KEYS, JSON_VALUES, st.sampled_from([None, 2, "\t"])), max_size=5))
    trailing = draw(st.booleans())
    out = [draw(GAPS), "{"]
    for i, (key, value, indent) in enumerate(members):
        out += [draw(GAPS), json.dumps(key, ensure_ascii=draw(st.booleans())), draw(GAPS), ":", draw(GAPS)]
        out.append(json.dumps(value, indent=indent, ensure_ascii=False))
        out.append(draw(GAPS))
        if i < len(members) - 1 or (trailing and members):
            out.append(",")
    out += [draw(GAPS), "}", draw(GAPS)]
    return "".join(out)


def check_round_trip(directory: Path, original: str) -> None:
    settings_path = directory / "settings.json"
    backup = directory / "backup.json"
    backup.unlink(missing_ok=True)
    settings_path.write_bytes(original.encode("utf-8"))
    before = jsonc.loads(original)
    cs = CursorSettings(settings_path, backup)
    cs.enable(PROXY)
    enabled = settings_path.read_bytes().decode("utf-8")
    after = jsonc.loads(enabled)
    assert {k: after[k] for k in MANAGED_KEYS} == EXPECTED
    assert {k: v for k, v in after.items() if k not in MANAGED_KEYS} == {
        k: v for k, v in before.items() if k not in MANAGED_KEYS
    }
    cs.disable()
    assert settings_path.read_bytes() == original.encode("utf-8")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(original=jsonc_documents())
def test_any_document_round_trips_exactly(tmp_path: Path, original: str):
    check_round_trip(tmp_path, original)


@pytest.mark.soak
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(original=jsonc_documents())
def test_any_document_round_trips_exactly_soak(tmp_path: Path, original: str):
    check_round_trip(tmp_path, original)
