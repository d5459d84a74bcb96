"""The certificate a server beyond loopback serves TLS with, checked before anything starts: a
missing, unreadable or mismatched file is one line naming the key and the file, never a failure
inside the HTTP server once it is half up."""
from __future__ import annotations

from pathlib import Path

import msgspec


class TlsFilesError(Exception):
    """The TLS certificate or key cannot be served (one line: the config key, the file, why)."""


class TlsFiles(msgspec.Struct, frozen=True):
    cert: Path
    key: Path


def _read(key: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsFilesError(f"server.{key}: cannot read {path}: {exc.strerror or exc}") from None


def _no_password() -> bytes:
    # An encrypted key would make OpenSSL ask on the terminal; a server has nobody to answer.
    raise TlsFilesError("server.tls_key: the key is encrypted: give the server an unencrypted key (readable by it alone)")


def checked_tls_files(cert: str, key: str) -> TlsFiles | None:
    """The TLS files to serve with (None when both are unset); TlsFilesError when they cannot be used."""
    if not cert and not key:
        return None
    files = TlsFiles(Path(cert).expanduser().absolute(), Path(key).expanduser().absolute())
    if b"-----BEGIN CERTIFICATE-----" not in _read("tls_cert", files.cert):
        raise TlsFilesError(f"server.tls_cert: not a PEM certificate: {files.cert}")
    if b"PRIVATE KEY-----" not in _read("tls_key", files.key):
        raise TlsFilesError(f"server.tls_key: not a PEM private key: {files.key}")
    import ssl  # only a server that serves TLS pays for it before it listens

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(files.cert, files.key, _no_password)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise TlsFilesError(f"server.tls_key: {files.key} does not match the certificate in {files.cert}") from None
        raise TlsFilesError(f"server.tls_cert, server.tls_key: cannot be served: {exc.reason or exc}") from None
    return files
