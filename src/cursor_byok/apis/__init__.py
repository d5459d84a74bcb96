"""Product APIs around the agent route: the upstream passthrough (more to come: models, account)."""
from __future__ import annotations

from .upstream import ForbiddenUpstream, Upstream, is_cursor_host, upstream_origin

__all__ = ["ForbiddenUpstream", "Upstream", "is_cursor_host", "upstream_origin"]
