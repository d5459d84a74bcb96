"""Product APIs around the agent route: upstream passthrough, model catalog and local side RPCs."""
from __future__ import annotations

from .local_rpcs import LocalRpcs
from .models import LOCAL_API_KEY, ModelCatalog, effort_for, variant_ids
from .upstream import ForbiddenUpstream, Upstream, is_cursor_host, upstream_origin

__all__ = [
    "LOCAL_API_KEY",
    "ForbiddenUpstream",
    "LocalRpcs",
    "ModelCatalog",
    "Upstream",
    "effort_for",
    "is_cursor_host",
    "upstream_origin",
    "variant_ids",
]
