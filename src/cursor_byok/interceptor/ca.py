"""The local certificate authority the intercepting proxy signs its *.cursor.sh leaf certificates with.

The CA lives at <data_dir>/ca/ca.crt + ca.key (directory 0700, key 0600). The key is generated on
this machine and never leaves it; only the certificate is handed to the OS trust store. The CA
carries X.509 name constraints: it can only vouch for the intercepted domains, so even a leaked key
cannot impersonate any other site to this machine.
"""
from __future__ import annotations

import datetime as dt
import functools
import hashlib
import ipaddress
import os
import shutil
import ssl
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_COMMON_NAME = "cursor-byok local CA"
CA_ORGANIZATION = "cursor-byok"
CA_DIR_NAME = "ca"
CA_CERT_NAME = "ca.crt"
CA_KEY_NAME = "ca.key"
CA_VALIDITY = dt.timedelta(days=3650)
# The only names the CA may sign for (each with all its subdomains): Cursor's own hosts.
PERMITTED_DOMAINS = ("cursor.sh",)
# Apple rejects TLS server certificates valid for more than 825 days; stay well under it.
LEAF_VALIDITY = dt.timedelta(days=397)
# Leaves (and their TLS contexts) kept for reuse, least recently used dropped first: any local
# client can ask for any number of names under cursor.sh (~21 kB each); the IDE uses a handful.
MAX_CACHED_LEAVES = 256
# Tolerate a client clock that runs a little behind ours.
CLOCK_SKEW = dt.timedelta(days=1)


class CAError(Exception):
    """The CA files are missing, unreadable or inconsistent (one line, names the file)."""


def is_permitted_host(host: str) -> bool:
    """`host` is one of the permitted domains or a subdomain of one."""
    host = host.lower().rstrip(".")
    return any(host == d or host.endswith("." + d) for d in PERMITTED_DOMAINS)


def _name_constraints() -> x509.NameConstraints:
    # Permitted DNS subtrees alone leave IP addresses unconstrained: exclude all of them.
    return x509.NameConstraints(
        permitted_subtrees=[x509.DNSName(d) for d in PERMITTED_DOMAINS],
        excluded_subtrees=[
            x509.IPAddress(ipaddress.ip_network("0.0.0.0/0")),
            x509.IPAddress(ipaddress.ip_network("::/0")),
        ],
    )


@dataclass(frozen=True, slots=True)
class CAPaths:
    directory: Path
    cert: Path
    key: Path

    @classmethod
    def for_data_dir(cls, data_dir: str | Path) -> CAPaths:
        directory = Path(data_dir).expanduser() / CA_DIR_NAME
        return cls(directory, directory / CA_CERT_NAME, directory / CA_KEY_NAME)


@dataclass(frozen=True, slots=True)
class LeafCertificate:
    host: str
    cert_pem: bytes
    key_pem: bytes


def certificate_fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 of the DER encoding, as colon-separated upper-case hex (what `openssl x509 -fingerprint` shows)."""
    digest = hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _write_private(path: Path, data: bytes, mode: int) -> None:
    # Create with the final mode from the start (no window where the key is world-readable),
    # then rename into place so a crash never leaves a half-written file under the real name.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


class LocalCA:
    """A loaded CA: signs leaf certificates for hostnames and hands out TLS server contexts."""

    def __init__(self, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey, paths: CAPaths) -> None:
        self.certificate = cert
        self._key = key
        self.paths = paths
        self._leaf_key: ec.EllipticCurvePrivateKey | None = None
        self._lock = threading.Lock()  # the one leaf key is made once
        self._leaf = functools.lru_cache(maxsize=MAX_CACHED_LEAVES)(self._sign_leaf)
        self._context = functools.lru_cache(maxsize=MAX_CACHED_LEAVES)(self._server_context)
        # What the leaves' TLS offers (set before the first handshake): HTTP/1.1 alone in front of
        # a team server, whose routes are decided per HTTP/1.1 request (`team.py`).
        self.alpn = ("h2", "http/1.1")

    # ---- creation / loading -------------------------------------------------------------
    @classmethod
    def exists(cls, data_dir: str | Path) -> bool:
        return CAPaths.for_data_dir(data_dir).cert.exists()

    @classmethod
    def create(cls, data_dir: str | Path) -> LocalCA:
        """Generate a new CA. Refuses to overwrite an existing certificate (users trusted it)."""
        paths = CAPaths.for_data_dir(data_dir)
        if paths.cert.exists():
            raise CAError(f"{paths.cert}: a CA certificate already exists")
        paths.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(paths.directory, 0o700)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.COMMON_NAME, CA_COMMON_NAME),
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, CA_ORGANIZATION),
            ]
        )
        now = _now()
        public = key.public_key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(now + CA_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(_name_constraints(), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        _write_private(paths.key, key_pem, 0o600)
        _write_private(paths.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
        return cls(cert, key, paths)

    @classmethod
    def load(cls, data_dir: str | Path) -> LocalCA:
        paths = CAPaths.for_data_dir(data_dir)
        try:
            cert_pem = paths.cert.read_bytes()
        except FileNotFoundError:
            raise CAError(f"{paths.cert}: no CA yet (run: cursor-byok ca init)") from None
        except OSError as exc:
            raise CAError(f"{paths.cert}: cannot read: {exc.strerror}") from None
        try:
            key_pem = paths.key.read_bytes()
        except FileNotFoundError:
            raise CAError(
                f"{paths.key}: CA key is missing; delete {paths.directory} and run `cursor-byok ca init` again"
            ) from None
        except OSError as exc:
            raise CAError(f"{paths.key}: cannot read: {exc.strerror}") from None
        try:
            cert = x509.load_pem_x509_certificate(cert_pem)
        except ValueError:
            raise CAError(f"{paths.cert}: not a PEM certificate") from None
        try:
            key = serialization.load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError):
            raise CAError(f"{paths.key}: not an unencrypted PEM private key") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
            raise CAError(f"{paths.key}: does not belong to {paths.cert}")
        if cert.not_valid_after_utc <= _now():
            raise CAError(f"{paths.cert}: CA certificate expired on {cert.not_valid_after_utc:%Y-%m-%d}")
        return cls(cert, key, paths)

    @classmethod
    def rotate(cls, data_dir: str | Path) -> tuple[LocalCA, str | None]:
        """Replace the CA (old key and certificate are deleted) with a new, name-constrained one.
        Returns it and the old certificate's fingerprint (None if there was none readable)."""
        paths = CAPaths.for_data_dir(data_dir)
        try:
            old: str | None = certificate_fingerprint(x509.load_pem_x509_certificate(paths.cert.read_bytes()))
        except (OSError, ValueError):
            old = None
        for path in (paths.cert, paths.key):
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise CAError(f"{path}: cannot remove: {exc.strerror}") from None
        return cls.create(data_dir), old

    @classmethod
    def load_or_create(cls, data_dir: str | Path) -> tuple[LocalCA, bool]:
        """(ca, created). A stray key without a certificate (interrupted init) is replaced."""
        if cls.exists(data_dir):
            return cls.load(data_dir), False
        return cls.create(data_dir), True

    # ---- facts ---------------------------------------------------------------------------
    @property
    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    @property
    def fingerprint(self) -> str:
        return certificate_fingerprint(self.certificate)

    @property
    def not_valid_after(self) -> dt.datetime:
        return self.certificate.not_valid_after_utc

    @property
    def name_constrained(self) -> bool:
        """False for a CA made by an older release, which can sign for any host."""
        try:
            self.certificate.extensions.get_extension_for_class(x509.NameConstraints)
        except x509.ExtensionNotFound:
            return False
        return True

    # ---- leaf certificates ---------------------------------------------------------------
    def issue(self, host: str) -> LeafCertificate:
        """A server certificate for `host` (the recently used ones cached). Only for permitted
        hosts: verifiers would refuse anything else (name constraints)."""
        host = host.lower().rstrip(".")
        if not is_permitted_host(host):
            raise CAError(f"{host}: the local CA signs only for {', '.join(PERMITTED_DOMAINS)} and its subdomains")
        return self._leaf(host)

    def cached_leaves(self) -> int:
        return self._leaf.cache_info().currsize

    def _sign_leaf(self, host: str) -> LeafCertificate:
        # One key for all leaves of this process: generating is cheap, but nothing gains from many.
        with self._lock:
            if self._leaf_key is None:
                self._leaf_key = ec.generate_private_key(ec.SECP256R1())
            key = self._leaf_key
        try:
            san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            san = x509.DNSName(host)
        now = _now()
        not_after = min(now + LEAF_VALIDITY, self.certificate.not_valid_after_utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        return LeafCertificate(
            host=host,
            cert_pem=cert.public_bytes(serialization.Encoding.PEM),
            key_pem=key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
        )

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting the leaf for `host`; ALPN offers `alpn` (HTTP/2 and HTTP/1.1)."""
        return self._context(host.lower().rstrip("."))

    def _server_context(self, host: str) -> ssl.SSLContext:
        leaf = self.issue(host)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(list(self.alpn))
        _load_chain_from_memory(ctx, leaf.cert_pem, leaf.key_pem)
        return ctx


def _load_chain_from_memory(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    # The ssl module only loads certificate chains from files: use a private temp dir and
    # remove it right away, so the leaf key is never left on disk.
    tmpdir = tempfile.mkdtemp(prefix="cursor-byok-leaf-")
    try:
        path = os.path.join(tmpdir, "leaf.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(cert_pem + key_pem)
        ctx.load_cert_chain(path)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
