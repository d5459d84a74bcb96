"""The local intercepting proxy the Cursor IDE is pointed at, and the CA it signs with.

Only Cursor's own hosts (*.cursor.sh) are TLS-terminated and sent to the gateway; every other
host is tunnelled untouched.

Every name is imported on first use: the gateway needs only the dialer unless the proxy runs (the
CA, the proxy and its trust checks bring cryptography and h2), and the CA commands need no HTTP
client.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

if TYPE_CHECKING:
    from .ca import CA_COMMON_NAME, CAError, CAPaths, LeafCertificate, LocalCA, certificate_fingerprint
    from .dialer import UpstreamDialer
    from .http1 import HttpError
    from .exchange import UPSTREAM_URL_HEADER
    from .limits import ProxyLimits, ProxyStats
    from .proxy import InterceptingProxy
    from .targets import is_cursor_host
    from .team import MODEL_LIST_PATHS, TeamRoutes, TeamServer, own_entries
    from .thread import ProxyThread
    from .trust import (
        CAState,
        LinuxTrustPaths,
        TrustReport,
        ca_trust_state,
        format_commands,
        has_name_constraints,
        trust_commands,
    )

__getattr__ = lazy_names(
    __name__,
    {
        "ca": ("CA_COMMON_NAME", "CAError", "CAPaths", "LeafCertificate", "LocalCA", "certificate_fingerprint"),
        "dialer": ("UpstreamDialer",),
        "http1": ("HttpError",),
        "exchange": ("UPSTREAM_URL_HEADER",),
        "limits": ("ProxyLimits", "ProxyStats"),
        "proxy": ("InterceptingProxy",),
        "targets": ("is_cursor_host",),
        "team": ("MODEL_LIST_PATHS", "TeamRoutes", "TeamServer", "own_entries"),
        "thread": ("ProxyThread",),
        "trust": (
            "CAState",
            "LinuxTrustPaths",
            "TrustReport",
            "ca_trust_state",
            "format_commands",
            "has_name_constraints",
            "trust_commands",
        ),
    },
)

__all__ = [
    "CA_COMMON_NAME",
    "CAError",
    "CAPaths",
    "CAState",
    "HttpError",
    "InterceptingProxy",
    "MODEL_LIST_PATHS",
    "LeafCertificate",
    "LinuxTrustPaths",
    "LocalCA",
    "ProxyLimits",
    "ProxyStats",
    "ProxyThread",
    "TeamRoutes",
    "TeamServer",
    "TrustReport",
    "UPSTREAM_URL_HEADER",
    "UpstreamDialer",
    "ca_trust_state",
    "certificate_fingerprint",
    "format_commands",
    "has_name_constraints",
    "is_cursor_host",
    "own_entries",
    "trust_commands",
]
