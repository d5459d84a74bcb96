"""Helpers for the interceptor tests: free ports, TLS contexts, self-signed stand-in certificates."""
from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

MODELS_PATH = "/aiserver.v1.AiService/AvailableModels"
# Protobuf-ish bytes: field 1 (string "byok-sonnet"), field 2 (len-delimited sub-message).
MODELS_BYTES = b"\x0a\x0bbyok-sonnet\x12\x05\x0a\x03abc"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client_context(cafile: Path | str) -> ssl.SSLContext:
    """Trusts exactly one CA file (no system roots)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile=str(cafile))
    return ctx


@dataclass
class SelfSigned:
    cert_pem: bytes
    key_pem: bytes
    cert_der: bytes

    def server_context(self, tmp: Path) -> ssl.SSLContext:
        path = tmp / "standin.pem"
        path.write_bytes(self.cert_pem + self.key_pem)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(path))
        return ctx


def self_signed(*names: str, ips: tuple[str, ...] = ()) -> SelfSigned:
    """A certificate that is its own issuer, unrelated to our CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stand-in server")])
    now = dt.datetime.now(dt.timezone.utc)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return SelfSigned(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        cert.public_bytes(serialization.Encoding.DER),
    )
