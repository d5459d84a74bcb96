"""The local CA: files and permissions, certificate shape, leaf issuing, trust detection."""
from __future__ import annotations

import datetime as dt
import os
import stat
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from interceptor_support import self_signed

from cursor_byok.interceptor import (
    CA_COMMON_NAME,
    CAError,
    CAState,
    LinuxTrustPaths,
    LocalCA,
    ca_trust_state,
    format_commands,
    trust_commands,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_create_writes_private_files_and_a_ten_year_ca(tmp_path: Path):
    ca = LocalCA.create(tmp_path)
    assert ca.paths.cert == tmp_path / "ca" / "ca.crt"
    assert ca.paths.key == tmp_path / "ca" / "ca.key"
    if os.name == "posix":
        assert mode(ca.paths.directory) == 0o700
        assert mode(ca.paths.key) == 0o600
    cert = x509.load_pem_x509_certificate(ca.paths.cert.read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == CA_COMMON_NAME
    assert cert.issuer == cert.subject
    basic = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert basic.critical and basic.value.ca and basic.value.path_length == 0
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert dt.timedelta(days=3640) < lifetime < dt.timedelta(days=3660)
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert b"PRIVATE KEY" not in ca.paths.cert.read_bytes()
    assert sorted(p.name for p in ca.paths.directory.iterdir()) == ["ca.crt", "ca.key"]  # no temp files left


def test_load_round_trips_and_create_never_overwrites(tmp_path: Path):
    ca = LocalCA.create(tmp_path)
    loaded = LocalCA.load(tmp_path)
    assert loaded.fingerprint == ca.fingerprint
    assert len(ca.fingerprint.split(":")) == 32
    with pytest.raises(CAError, match="already exists"):
        LocalCA.create(tmp_path)
    again, created = LocalCA.load_or_create(tmp_path)
    assert not created and again.fingerprint == ca.fingerprint
    fresh, created = LocalCA.load_or_create(tmp_path / "other")
    assert created and fresh.fingerprint != ca.fingerprint


def test_leaf_certificates_are_signed_by_the_ca_for_the_exact_host(tmp_path: Path):
    ca = LocalCA.create(tmp_path)
    leaf = ca.issue("API2.cursor.sh.")
    assert ca.issue("api2.cursor.sh") is leaf  # cached per host
    cert = x509.load_pem_x509_certificate(leaf.cert_pem)
    cert.verify_directly_issued_by(ca.certificate)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["api2.cursor.sh"]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ExtendedKeyUsageOID.SERVER_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert cert.not_valid_after_utc - cert.not_valid_before_utc <= dt.timedelta(days=825)
    other = x509.load_pem_x509_certificate(ca.issue("api3.cursor.sh").cert_pem)
    assert other.serial_number != cert.serial_number
    assert ca.server_context("api2.cursor.sh") is ca.server_context("api2.cursor.sh")


def test_load_reports_broken_ca_files_by_name(tmp_path: Path):
    with pytest.raises(CAError, match="ca init"):
        LocalCA.load(tmp_path)
    ca = LocalCA.create(tmp_path)
    key = ca.paths.key.read_bytes()
    ca.paths.key.unlink()
    with pytest.raises(CAError, match="ca.key: CA key is missing"):
        LocalCA.load(tmp_path)
    other = LocalCA.create(tmp_path / "other")
    ca.paths.key.write_bytes(other.paths.key.read_bytes())
    with pytest.raises(CAError, match="does not belong"):
        LocalCA.load(tmp_path)
    ca.paths.key.write_bytes(key)
    ca.paths.cert.write_bytes(b"garbage")
    with pytest.raises(CAError, match="not a PEM certificate"):
        LocalCA.load(tmp_path)


def bundle_with(tmp_path: Path, *pems: bytes) -> Path:
    path = tmp_path / "bundle.crt"
    path.write_bytes(b"# system roots\n" + b"\n".join(pems))
    return path


def test_trust_state_on_linux_looks_for_the_exact_certificate(tmp_path: Path):
    assert ca_trust_state(tmp_path / "d", platform="linux").state is CAState.MISSING
    ca = LocalCA.create(tmp_path / "d")
    unrelated = self_signed("example.invalid").cert_pem
    empty = LinuxTrustPaths(bundle_files=[bundle_with(tmp_path, unrelated)])
    report = ca_trust_state(tmp_path / "d", platform="linux", linux_paths=empty)
    assert report.state is CAState.UNTRUSTED and report.fingerprint == ca.fingerprint

    trusted = LinuxTrustPaths(bundle_files=[bundle_with(tmp_path, unrelated, ca.cert_pem, unrelated)])
    assert ca_trust_state(tmp_path / "d", platform="linux", linux_paths=trusted).state is CAState.TRUSTED

    hashed = tmp_path / "certs"
    hashed.mkdir()
    (hashed / "abcd1234.0").write_bytes(ca.cert_pem)
    in_dir = LinuxTrustPaths(cert_dirs=[hashed])
    assert ca_trust_state(tmp_path / "d", platform="linux", linux_paths=in_dir).state is CAState.TRUSTED

    anchors = tmp_path / "anchors"
    anchors.mkdir()
    (anchors / "cursor-byok-local-ca.crt").write_bytes(ca.cert_pem)
    only_anchor = LinuxTrustPaths(bundle_files=[bundle_with(tmp_path, unrelated)], anchor_dirs=[anchors])
    report = ca_trust_state(tmp_path / "d", platform="linux", linux_paths=only_anchor)
    assert report.state is CAState.UNTRUSTED and "update-ca" in report.detail


def test_trust_state_elsewhere(tmp_path: Path):
    LocalCA.create(tmp_path)
    calls: list[list[str]] = []

    def runner(code: int):
        def run(argv, **kw):
            calls.append(argv)
            return subprocess.CompletedProcess(argv, code, b"", b"")

        return run

    assert ca_trust_state(tmp_path, platform="darwin", runner=runner(0)).state is CAState.TRUSTED
    assert ca_trust_state(tmp_path, platform="darwin", runner=runner(1)).state is CAState.UNTRUSTED
    assert calls[0][:3] == ["security", "verify-cert", "-c"] and calls[0][3].endswith("ca.crt")
    assert ca_trust_state(tmp_path, platform="win32").state is CAState.UNKNOWN
    (tmp_path / "ca" / "ca.key").unlink()
    assert ca_trust_state(tmp_path, platform="linux").state is CAState.INVALID


def test_trust_commands_per_platform(tmp_path: Path):
    cert = tmp_path / "ca.crt"
    mac = format_commands(trust_commands(cert, "darwin"), "darwin")
    assert len(mac) == 1 and "security add-trusted-cert -d -r trustRoot -k /Library/Keychains/System.keychain" in mac[0]
    assert mac[0].endswith(str(cert))
    win = format_commands(trust_commands(cert, "win32"), "win32")
    assert win == [f"certutil -addstore -f Root {cert}"]
    linux = " && ".join(format_commands(trust_commands(cert, "linux"), "linux"))
    assert str(cert) in linux
    assert "update-ca-certificates" in linux or "update-ca-trust extract" in linux
