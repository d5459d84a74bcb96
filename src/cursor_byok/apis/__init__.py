"""Product APIs around the agent route: upstream passthrough, model catalog and local side RPCs.

The passthrough and the side RPCs (and the HTTP client they bring) are imported on first use: the
checks `serve` makes before it listens need only `hosts`."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names
from .hosts import UnusableProxy, is_cursor_host, relay_proxy

if TYPE_CHECKING:
    from .local_rpcs import LocalRpcs
    from .models import LOCAL_API_KEY, ModelCatalog, effort_for, variant_ids
    from .upstream import ForbiddenUpstream, Upstream, upstream_origin

__getattr__ = lazy_names(
    __name__,
    {
        "local_rpcs": ("LocalRpcs",),
        "models": ("LOCAL_API_KEY", "ModelCatalog", "effort_for", "variant_ids"),
        "upstream": ("ForbiddenUpstream", "Upstream", "upstream_origin"),
    },
)

__all__ = [
    "LOCAL_API_KEY",
    "ForbiddenUpstream",
    "LocalRpcs",
    "ModelCatalog",
    "UnusableProxy",
    "Upstream",
    "effort_for",
    "is_cursor_host",
    "relay_proxy",
    "upstream_origin",
    "variant_ids",
]
