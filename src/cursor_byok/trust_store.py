"""The one trust store: the CAs every outbound TLS connection verifies its server with (model
providers, the passthrough to Cursor's servers, the Run relay), loaded once per process.

Loading a CA bundle into a TLS context costs ~40 ms of CPU, so a server loads it once: `verified()`
builds the context (the CAs httpx would choose: SSL_CERT_FILE / SSL_CERT_DIR when `trust_env`, else
certifi's) and every client is handed that one. The load lets go of the interpreter lock, so the
server starts it in a thread beside the gateway's import (`gateway/front.py`).

aiohttp builds two TLS contexts of its own when it is imported, its defaults for a session given
none, each loading the system's CA bundle: ~90 ms of CPU at every start for contexts this server
never uses (each of its sessions is given the trust store). `default_cas_skipped()` around that
import makes them without loading any CAs: the verifying default then trusts no server at all (a
session that fell back on it would refuse every server, never accept one), and the other one does
not verify anyway.
"""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # ssl is imported where it is used: the CLI's light commands import this module
    import ssl


class TrustStoreError(Exception):
    """The CA certificates could not be loaded; its text is one line naming where from and the fix."""


def import_modules() -> None:
    """Import what `verified` uses, so that it imports nothing itself: the server runs it in a thread
    while another imports the rest of the server, and two threads importing modules that import each
    other (importlib.resources: certifi's and the dashboard's) can deadlock (_DeadlockError)."""
    import certifi.core  # noqa: F401 - httpx's default CAs: where() reads them through importlib.resources
    import httpx  # noqa: F401


def verified(*, trust_env: bool = True) -> ssl.SSLContext:
    """A new verifying context with the trust store's CAs; build it once and share it.
    TrustStoreError when the bundle cannot be loaded."""
    import httpx  # its rule for which CAs, so every client of ours trusts the same ones

    try:
        return httpx.create_ssl_context(trust_env=trust_env)
    except OSError as exc:  # ssl.SSLError too: a file that is not a PEM bundle
        raise TrustStoreError(_problem(exc, trust_env)) from None


def _problem(exc: OSError, trust_env: bool) -> str:
    reason = exc.strerror or str(exc)
    for variable in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        value = os.environ.get(variable) if trust_env else None
        if value:  # httpx's order: the file wins
            return f"the CA certificates in {variable}={value}: {reason} (point it at a PEM bundle, or unset it)"
    return f"certifi's CA certificates: {reason} (reinstall certifi, or name a bundle in SSL_CERT_FILE)"


@contextlib.contextmanager
def default_cas_skipped() -> Iterator[None]:
    """While inside, contexts made in this thread do not load the system's default CAs (see the
    module's note); other threads' contexts are untouched."""
    import ssl

    original = ssl.SSLContext.set_default_verify_paths
    importing = threading.get_ident()

    def set_default_verify_paths(context: ssl.SSLContext) -> None:
        if threading.get_ident() != importing:
            original(context)

    ssl.SSLContext.set_default_verify_paths = set_default_verify_paths  # type: ignore[method-assign]
    try:
        yield
    finally:
        ssl.SSLContext.set_default_verify_paths = original  # type: ignore[method-assign]


__all__ = ["TrustStoreError", "default_cas_skipped", "import_modules", "verified"]
