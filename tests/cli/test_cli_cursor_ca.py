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


def test_cursor_enable_http2_leaves_cursor_on_http2_and_doctor_says_so(run_cli, write_config, tmp_path: Path):
    path = write_config(proxy_port=18997)
    settings = tmp_path / "Cursor" / "User" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(SETTINGS)
    args = ("--settings", str(settings), "--config", str(path))
    run_cli("ca", "init", "--config", str(path))
    assert jsonc.loads((run_cli("cursor", "enable", *args), settings.read_text())[1])["cursor.general.disableHttp2"] is True
    # Opting in later takes back the disableHttp2 an earlier enable set.
    enabled = run_cli("cursor", "enable", "--http2", *args)
    assert enabled.code == 0, enabled.err
    assert "transport: HTTP/2" in enabled.out
    values = jsonc.loads(settings.read_text())
    assert "cursor.general.disableHttp2" not in values and values["http.proxy"] == "http://127.0.0.1:18997"
    status = run_cli("cursor", "status", *args)
    assert "state: enabled" in status.out and "transport: HTTP/2 (Run)" in status.out
    doctor = run_cli("doctor", "--settings", str(settings), "--config", str(path))
    assert "HTTP/2, the agent as one Run stream" in doctor.out
    assert run_cli("cursor", "disable", *args).code == 0
    assert settings.read_text() == SETTINGS


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


def write_unconstrained_ca(data_dir: Path) -> str:
    """A CA as older releases made it: no name constraints. Returns its fingerprint."""
    import datetime as dt

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from cursor_byok.interceptor import certificate_fingerprint

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cursor-byok local CA")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    (data_dir / "ca").mkdir(parents=True)
    (data_dir / "ca" / "ca.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (data_dir / "ca" / "ca.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return certificate_fingerprint(cert)


def test_ca_init_rotate_replaces_an_unconstrained_ca_and_says_what_to_retrust(run_cli, write_config):
    path = write_config()
    data_dir = path.parent / "data"
    old = write_unconstrained_ca(data_dir)
    kept = run_cli("ca", "init", "--config", str(path))
    assert kept.code == 0 and FINGERPRINT.search(kept.out).group(1) == old
    assert kept.err_lines == [
        "warning: this CA (made by an older release) can sign for any host; "
        "replace it with one limited to *.cursor.sh: `cursor-byok ca init --rotate`"
    ]
    assert "signs for: any host (run `cursor-byok ca init --rotate`)" in run_cli("ca", "show", "--config", str(path)).out

    rotated = run_cli("ca", "init", "--rotate", "--config", str(path))
    assert rotated.code == 0, rotated.err
    lines = rotated.out.splitlines()
    assert lines[0] == f"replaced: {data_dir / 'ca' / 'ca.crt'} (the old key is deleted)"
    assert lines[1] == f"old sha256 fingerprint: {old}"
    new = re.fullmatch(r"new sha256 fingerprint: (\S+) \(signs only for \*\.cursor\.sh\)", lines[2]).group(1)
    assert new != old
    assert lines[3].startswith("next: trust the new CA with `cursor-byok ca install --run`")
    cert = x509.load_pem_x509_certificate((data_dir / "ca" / "ca.crt").read_bytes())
    assert cert.extensions.get_extension_for_class(x509.NameConstraints).value.permitted_subtrees == [x509.DNSName("cursor.sh")]
    assert "signs for: *.cursor.sh only (name constraints)" in run_cli("ca", "show", "--config", str(path)).out
    assert run_cli("ca", "init", "--config", str(path)).err == ""


def test_cursor_enable_gives_cursor_the_proxy_credentials_when_a_token_is_required(run_cli, write_config, tmp_path: Path, monkeypatch):
    token = "cli-test-token-0123456789abcdef"
    monkeypatch.setenv("CLI_TEST_TOKEN", token)
    path = write_config(proxy_port=18998)
    path.write_text(path.read_text().replace("[server]\n", '[server]\nauth_token_env = "CLI_TEST_TOKEN"\n'))
    settings = tmp_path / "Cursor" / "User" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(SETTINGS)
    settings.chmod(0o644)
    args = ("--settings", str(settings), "--config", str(path))
    run_cli("ca", "init", "--config", str(path))

    enabled = run_cli("cursor", "enable", *args)
    assert enabled.code == 0, enabled.err
    assert jsonc.loads(settings.read_text())["http.proxy"] == f"http://cursor-byok:{token}@127.0.0.1:18998"
    assert settings.stat().st_mode & 0o077 == 0  # the token is in it now
    status = run_cli("cursor", "status", *args)
    assert "state: enabled" in status.out
    for result in (enabled, status):
        assert token not in result.out + result.err
    assert run_cli("cursor", "disable", *args).code == 0
    assert settings.read_text() == SETTINGS
