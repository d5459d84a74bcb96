"""The local CA: files and permissions, certificate shape, leaf issuing, trust detection."""
from __future__ import annotations

import datetime as dt
import os
import ssl
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


def sign_with_the_ca_key(data_dir: Path, name: str, tmp: Path) -> ssl.SSLContext:
    """A server certificate for `name` signed with the CA's own key, the way a thief holding a
    leaked key would (LocalCA.issue refuses such names)."""
    import datetime as dt
    import ipaddress

    from cryptography.hazmat.primitives import hashes, serialization

    ca_cert = x509.load_pem_x509_certificate((data_dir / "ca" / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((data_dir / "ca" / "ca.key").read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    try:
        san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        san = x509.DNSName(name)
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([san]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = tmp / f"leaf-{name}.pem"
    pem.write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pem))
    return ctx


def handshake(server_ctx: ssl.SSLContext, cafile: Path, hostname: str) -> None:
    """A full TLS handshake in memory: a client trusting only our CA against `server_ctx`."""
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(cafile=str(cafile))
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=hostname)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(20):
        for name, side in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return
    raise AssertionError("handshake did not finish")


def test_name_constraints_let_the_ca_vouch_for_cursor_hosts_only(tmp_path: Path):
    ca = LocalCA.create(tmp_path)
    constraints = ca.certificate.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    assert constraints.value.permitted_subtrees == [x509.DNSName("cursor.sh")]
    assert ca.name_constrained
    handshake(ca.server_context("api2.cursor.sh"), ca.paths.cert, "api2.cursor.sh")  # ours verifies
    handshake(sign_with_the_ca_key(tmp_path, "api3.cursor.sh", tmp_path), ca.paths.cert, "api3.cursor.sh")
    for foreign in ("example.com", "cursor.sh.evil.com", "github.com"):
        with pytest.raises(ssl.SSLCertVerificationError, match="permitted subtree violation|name constraint"):
            handshake(sign_with_the_ca_key(tmp_path, foreign, tmp_path), ca.paths.cert, foreign)
    with pytest.raises(ssl.SSLCertVerificationError, match="excluded subtree violation|name constraint"):
        handshake(sign_with_the_ca_key(tmp_path, "127.0.0.1", tmp_path), ca.paths.cert, "127.0.0.1")
    with pytest.raises(CAError, match="signs only for cursor.sh"):
        ca.issue("example.com")


def test_rotate_replaces_an_unconstrained_ca(tmp_path: Path):
    old = LocalCA.create(tmp_path)
    rotated, old_fingerprint = LocalCA.rotate(tmp_path)
    new = LocalCA.load(tmp_path)
    assert old_fingerprint == old.fingerprint != new.fingerprint == rotated.fingerprint and new.name_constrained
    assert sorted(p.name for p in new.paths.directory.iterdir()) == ["ca.crt", "ca.key"]


def test_leaf_certificates_are_kept_for_the_recently_used_names_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("cursor_byok.interceptor.ca.MAX_CACHED_LEAVES", 8)
    ca = LocalCA.create(tmp_path / "data")
    kept = ca.issue("api2.cursor.sh")
    context = ca.server_context("api2.cursor.sh")
    for i in range(40):
        ca.issue(f"n{i}.cursor.sh")
        ca.server_context(f"n{i}.cursor.sh")
        ca.issue("api2.cursor.sh")  # in use all along
        ca.server_context("api2.cursor.sh")
    assert ca.cached_leaves() == 8
    assert ca.issue("api2.cursor.sh") is kept and ca.server_context("api2.cursor.sh") is context
    assert ca.issue("n0.cursor.sh").host == "n0.cursor.sh"  # signed again after it was dropped
