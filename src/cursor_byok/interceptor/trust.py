"""Is our CA trusted by the operating system, and which command makes it so.

Detection is read-only: on Linux we look for our certificate (by SHA-256 of its DER bytes) in the
OpenSSL default verify paths and the well-known bundle files; on macOS we ask `security verify-cert`.
Elsewhere the answer is "unknown".
"""
from __future__ import annotations

import base64
import enum
import hashlib
import os
import re
import shlex
import shutil
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.serialization import Encoding

from .ca import CAError, CAPaths, LocalCA

INSTALLED_CERT_NAME = "cursor-byok-local-ca.crt"
DEBIAN_ANCHOR_DIR = Path("/usr/local/share/ca-certificates")
REDHAT_ANCHOR_DIR = Path("/etc/pki/ca-trust/source/anchors")
MACOS_SYSTEM_KEYCHAIN = "/Library/Keychains/System.keychain"
_WELL_KNOWN_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu, Arch, Alpine
    "/etc/pki/tls/certs/ca-bundle.crt",  # Fedora, RHEL
    "/etc/ssl/ca-bundle.pem",  # openSUSE
    "/etc/ssl/cert.pem",
)
_PEM_BLOCK = re.compile(rb"-----BEGIN CERTIFICATE-----\s*(.+?)\s*-----END CERTIFICATE-----", re.S)
# Files bigger than this in a cert dir are not certificates; skip them instead of reading them.
_MAX_CERT_FILE = 4 * 1024 * 1024


class CAState(str, enum.Enum):
    MISSING = "missing"
    UNTRUSTED = "present-untrusted"
    TRUSTED = "trusted"
    UNKNOWN = "unknown"  # present, but this platform gives us no way to check
    INVALID = "invalid"  # files exist but cannot be used (key missing, mismatched, expired)


@dataclass(frozen=True, slots=True)
class TrustReport:
    state: CAState
    detail: str = ""
    fingerprint: str = ""


@dataclass(frozen=True, slots=True)
class LinuxTrustPaths:
    """Where a Linux system keeps trusted roots: bundles and hashed dirs (in use) and anchor dirs (input)."""

    bundle_files: Sequence[Path] = field(default_factory=tuple)
    cert_dirs: Sequence[Path] = field(default_factory=tuple)
    anchor_dirs: Sequence[Path] = field(default_factory=tuple)

    @classmethod
    def system(cls) -> LinuxTrustPaths:
        verify = ssl.get_default_verify_paths()
        bundles = [p for p in (verify.cafile, verify.openssl_cafile, *_WELL_KNOWN_BUNDLES) if p]
        dirs = [p for p in (verify.capath, verify.openssl_capath, "/etc/ssl/certs") if p]
        return cls(
            bundle_files=tuple(dict.fromkeys(Path(p) for p in bundles)),
            cert_dirs=tuple(dict.fromkeys(Path(p) for p in dirs)),
            anchor_dirs=(DEBIAN_ANCHOR_DIR, REDHAT_ANCHOR_DIR),
        )


def _der_digests(pem_data: bytes) -> Iterable[bytes]:
    for match in _PEM_BLOCK.finditer(pem_data):
        try:
            yield hashlib.sha256(base64.b64decode(match.group(1), validate=False)).digest()
        except ValueError:
            continue


def _file_contains(path: Path, digest: bytes) -> bool:
    try:
        if not path.is_file() or path.stat().st_size > _MAX_CERT_FILE:
            return False
        data = path.read_bytes()
    except OSError:
        return False
    return any(d == digest for d in _der_digests(data))


def _dir_contains(directory: Path, digest: bytes) -> bool:
    try:
        entries = list(directory.iterdir())
    except OSError:
        return False
    return any(_file_contains(p, digest) for p in entries)


def linux_trust(cert_der_digest: bytes, paths: LinuxTrustPaths) -> tuple[bool, str]:
    """(trusted, detail) for a certificate on a Linux system with the given trust locations."""
    for bundle in paths.bundle_files:
        if _file_contains(bundle, cert_der_digest):
            return True, f"found in {bundle}"
    for directory in paths.cert_dirs:
        if _dir_contains(directory, cert_der_digest):
            return True, f"found in {directory}"
    for directory in paths.anchor_dirs:
        if _dir_contains(directory, cert_der_digest):
            return False, (
                f"copied to {directory} but the system bundle is not rebuilt "
                "(run: sudo update-ca-certificates, or sudo update-ca-trust extract)"
            )
    return False, "not in the system trust store (run: cursor-byok ca install)"


Runner = Callable[..., "subprocess.CompletedProcess[bytes]"]


def ca_trust_state(
    data_dir: str | Path,
    *,
    platform: str | None = None,
    linux_paths: LinuxTrustPaths | None = None,
    runner: Runner = subprocess.run,
) -> TrustReport:
    """The CA's state: missing, invalid, present-untrusted, trusted, or unknown (no way to check)."""
    paths = CAPaths.for_data_dir(data_dir)
    if not paths.cert.exists():
        return TrustReport(CAState.MISSING, f"{paths.cert} does not exist (run: cursor-byok ca init)")
    try:
        ca = LocalCA.load(data_dir)
    except CAError as exc:
        return TrustReport(CAState.INVALID, str(exc))
    digest = hashlib.sha256(ca.certificate.public_bytes(Encoding.DER)).digest()
    platform = platform or sys.platform
    if platform.startswith("linux"):
        trusted, detail = linux_trust(digest, linux_paths or LinuxTrustPaths.system())
        return TrustReport(CAState.TRUSTED if trusted else CAState.UNTRUSTED, detail, ca.fingerprint)
    if platform == "darwin":
        try:
            done = runner(
                ["security", "verify-cert", "-c", str(paths.cert)],
                capture_output=True,
                timeout=15,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return TrustReport(CAState.UNKNOWN, f"security verify-cert failed: {exc}", ca.fingerprint)
        if done.returncode == 0:
            return TrustReport(CAState.TRUSTED, "security verify-cert succeeded", ca.fingerprint)
        return TrustReport(CAState.UNTRUSTED, "not trusted by the keychain (run: cursor-byok ca install)", ca.fingerprint)
    return TrustReport(CAState.UNKNOWN, "cannot check trust on this platform", ca.fingerprint)


def has_name_constraints(data_dir: str | Path) -> bool:
    """The CA in `data_dir` exists and can sign only for the intercepted domains."""
    try:
        return LocalCA.load(data_dir).name_constrained
    except CAError:
        return False


def _needs_sudo() -> bool:
    return os.name == "posix" and hasattr(os, "geteuid") and os.geteuid() != 0


def trust_commands(cert_path: str | Path, platform: str | None = None) -> list[list[str]]:
    """The commands (argv lists, run in order) that make the OS trust our CA certificate."""
    cert = str(cert_path)
    platform = platform or sys.platform
    sudo = ["sudo"] if _needs_sudo() and platform != "win32" else []
    if platform == "darwin":
        return [sudo + ["security", "add-trusted-cert", "-d", "-r", "trustRoot", "-k", MACOS_SYSTEM_KEYCHAIN, cert]]
    if platform == "win32":
        return [["certutil", "-addstore", "-f", "Root", cert]]
    # Linux: Debian family ships update-ca-certificates, Fedora/RHEL/Arch ship update-ca-trust.
    redhat = shutil.which("update-ca-trust") is not None or REDHAT_ANCHOR_DIR.is_dir()
    debian = shutil.which("update-ca-certificates") is not None or DEBIAN_ANCHOR_DIR.is_dir()
    if redhat and not debian:
        return [
            sudo + ["cp", cert, str(REDHAT_ANCHOR_DIR / INSTALLED_CERT_NAME)],
            sudo + ["update-ca-trust", "extract"],
        ]
    return [
        sudo + ["mkdir", "-p", str(DEBIAN_ANCHOR_DIR)],
        sudo + ["cp", cert, str(DEBIAN_ANCHOR_DIR / INSTALLED_CERT_NAME)],
        sudo + ["update-ca-certificates"],
    ]


def format_commands(commands: Sequence[Sequence[str]], platform: str | None = None) -> list[str]:
    platform = platform or sys.platform
    if platform == "win32":
        return [subprocess.list2cmdline(list(c)) for c in commands]
    return [shlex.join(c) for c in commands]
