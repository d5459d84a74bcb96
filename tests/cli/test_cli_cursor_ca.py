"""`ca init|show|install` and `cursor enable|disable|status`."""
from __future__ import annotations

import json
import re
from pathlib import Path

from cryptography import x509

from cursor_byok.cursor_settings import jsonc

FINGERPRINT = re.compile(r"sha256 fingerprint: ((?:[0-9A-F]{2}:){31}[0-9A-F]{2})")


def test_ca_init_is_idempotent_and_show_reports_it(run_cli, write_config):
    path = write_config()
    cert = path.parent / "data" / "ca" / "ca.crt"
    first = run_cli("ca", "init", "--config", str(path))
    assert first.code == 0
    assert first.out.splitlines()[0] == f"created: {cert}"
    fingerprint = FINGERPRINT.search(first.out).group(1)
    again = run_cli("ca", "init", "--config", str(path))
    assert again.out.splitlines()[0] == f"exists: {cert}"
    assert FINGERPRINT.search(again.out).group(1) == fingerprint

    shown = run_cli("ca", "show", "--config", str(path))
    assert shown.code == 0
    assert FINGERPRINT.search(shown.out).group(1) == fingerprint
    assert re.search(r"^trust: (present-untrusted|trusted)", shown.out, re.M)
    pem = run_cli("ca", "show", "--pem", "--config", str(path)).out
    assert x509.load_pem_x509_certificate(pem.encode()) == x509.load_pem_x509_certificate(cert.read_bytes())


def test_ca_show_without_a_ca_fails_cleanly(run_cli, write_config):
    result = run_cli("ca", "show", "--config", str(write_config()))
    assert result.code == 1
    [line] = result.err_lines
    assert "ca.crt: no CA yet (run: cursor-byok ca init)" in line


def test_ca_install_prints_the_platform_command(run_cli, write_config):
    path = write_config()
    result = run_cli("ca", "install", "--config", str(path))
    assert result.code == 0
    cert = path.parent / "data" / "ca" / "ca.crt"
    assert cert.exists()  # created on demand
    commands = [line for line in result.out.splitlines() if not line.startswith("#")]
    assert any(str(cert) in line for line in commands)
    assert any(
        word in result.out for word in ("update-ca-certificates", "update-ca-trust", "add-trusted-cert", "certutil -addstore")
    )
    assert run_cli("ca", "install", "--print", "--config", str(path)).out == result.out


SETTINGS = """{
    // keep me
    "editor.fontSize": 13,
    "http.proxySupport": "off",
}
"""


def test_cursor_enable_status_disable_round_trip(run_cli, write_config, tmp_path: Path):
    path = write_config(proxy_port=18999)
    settings = tmp_path / "Cursor" / "User" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(SETTINGS)
    args = ("--settings", str(settings), "--config", str(path))

    refused = run_cli("cursor", "enable", *args)
    assert refused.code == 1 and "ca init" in refused.err
    assert settings.read_text() == SETTINGS

    run_cli("ca", "init", "--config", str(path))
    enabled = run_cli("cursor", "enable", *args)
    assert enabled.code == 0, enabled.err
    assert "http://127.0.0.1:18999" in enabled.out
    values = jsonc.loads(settings.read_text())
    assert values["http.proxy"] == "http://127.0.0.1:18999"
    assert values["http.proxySupport"] == "override"
    assert values["cursor.general.disableHttp2"] is True
    assert values["http.experimental.systemCertificatesV2"] is True
    assert "// keep me" in settings.read_text()

    status = run_cli("cursor", "status", *args)
    assert status.code == 0
    assert "state: enabled" in status.out
    assert 'http.proxy: "http://127.0.0.1:18999"' in status.out

    disabled = run_cli("cursor", "disable", *args)
    assert disabled.code == 0 and "restored" in disabled.out
    assert settings.read_text() == SETTINGS
    assert "state: disabled" in run_cli("cursor", "status", *args).out
    assert "nothing to undo" in run_cli("cursor", "disable", *args).out


def test_cursor_enable_uses_the_default_settings_path_and_options(run_cli, write_config, isolated_home: Path):
    path = write_config(proxy_port=18998)
    default = isolated_home / ".config" / "Cursor" / "User" / "settings.json"
    result = run_cli("cursor", "enable", "--force", "--proxy-support", "on", "--proxy-url", "http://127.0.0.1:7777", "--config", str(path))
    assert result.code == 0, result.err
    values = json.loads(default.read_text())
    assert values["http.proxy"] == "http://127.0.0.1:7777" and values["http.proxySupport"] == "on"
    run_cli("cursor", "disable", "--config", str(path))
    assert not default.exists()  # it did not exist before


def test_cursor_enable_refuses_an_unparseable_settings_file(run_cli, write_config, tmp_path: Path):
    path = write_config()
    settings = tmp_path / "settings.json"
    settings.write_text('{ "a": 1 "b": 2 }')
    result = run_cli("cursor", "enable", "--force", "--settings", str(settings), "--config", str(path))
    assert result.code == 1
    [line] = result.err_lines
    assert "cannot parse (line 1, column 10" in line and "left untouched" in line
    assert settings.read_text() == '{ "a": 1 "b": 2 }'


def test_cursor_enable_turns_the_proxy_on_in_the_config(run_cli, write_config, tmp_path: Path):
    from cursor_byok.config import load

    path = write_config("# my models go here\n", proxy_port=18996)
    assert load(path).proxy.enabled is False
    settings = tmp_path / "User" / "settings.json"
    settings.parent.mkdir()
    run_cli("ca", "init", "--config", str(path))
    result = run_cli("cursor", "enable", "--settings", str(settings), "--config", str(path))
    assert result.code == 0, result.err
    assert f"proxy: turned on in {path} ([proxy] enabled = true)" in result.out.splitlines()
    assert load(path).proxy.enabled is True and "# my models go here" in path.read_text()
    again = run_cli("cursor", "enable", "--settings", str(settings), "--config", str(path))
    assert "proxy: turned on" not in again.out


def test_cursor_enable_refuses_when_it_cannot_turn_the_proxy_on(run_cli, write_config, tmp_path: Path):
    path = tmp_path / "inline.toml"
    path.write_text(f'proxy = {{ port = 18995 }}\n[server]\ndata_dir = "{tmp_path / "data"}"\n')
    settings = tmp_path / "User" / "settings.json"
    settings.parent.mkdir()
    result = run_cli("cursor", "enable", "--force", "--settings", str(settings), "--config", str(path))
    assert result.code == 2
    assert result.err_lines == [
        f"cursor-byok: {path}: proxy.enabled: cannot turn it on here; set `enabled = true` under [proxy] yourself"
    ]
    assert not settings.exists()  # Cursor is not pointed at a proxy nothing would serve


def test_cursor_enable_needs_force_where_cursor_is_not_installed(run_cli, write_config, isolated_home: Path):
    path = write_config()
    run_cli("ca", "init", "--config", str(path))
    result = run_cli("cursor", "enable", "--config", str(path))
    user_dir = isolated_home / ".config" / "Cursor" / "User"
    assert result.code == 1
    assert result.err_lines[-1] == (
        f"cursor-byok: {user_dir} does not exist: is Cursor installed for this user? "
        "Pass --settings PATH for another location, or --force to create it"
    )
    assert not user_dir.exists()
    assert run_cli("cursor", "enable", "--force", "--config", str(path)).code == 0
    assert (user_dir / "settings.json").exists()


def test_cursor_disable_keeps_a_value_changed_since_enable_unless_forced(run_cli, write_config, tmp_path: Path):
    path = write_config()
    settings = tmp_path / "User" / "settings.json"
    settings.parent.mkdir()
    original = '{\n  "http.proxy": "http://corp-proxy:3128"\n}\n'
    settings.write_text(original)
    run_cli("ca", "init", "--config", str(path))
    enabled = run_cli("cursor", "enable", "--settings", str(settings), "--config", str(path))
    assert "chain: hosts other than *.cursor.sh go on through http://corp-proxy:3128, as before" in enabled.out
    edited = jsonc.set_value(settings.read_text(), "http.proxy", '"http://new-proxy:8080"')
    settings.write_text(edited)
    refused = run_cli("cursor", "disable", "--config", str(path))  # finds the file enable edited
    assert refused.code == 1
    assert refused.err_lines == [
        f"cursor-byok: {settings}: http.proxy changed since `cursor-byok cursor enable`; left untouched "
        "(`cursor-byok cursor disable --force` restores the saved values anyway)"
    ]
    assert settings.read_text() == edited
    forced = run_cli("cursor", "disable", "--force", "--config", str(path))
    assert forced.code == 0 and settings.read_text() == original
