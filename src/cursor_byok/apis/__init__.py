"""Product APIs around the agent route: upstream passthrough, model catalog and local side RPCs."""
from __future__ import annotations

from .local_rpcs import LocalRpcs
from .models import LOCAL_API_KEY, ModelCatalog, effort_for, variant_ids
from .upstream import ForbiddenUpstream, UnusableProxy, Upstream, is_cursor_host, relay_proxy, upstream_origin

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
