"""Several instances on one PostgreSQL database: conversation leases and the requests that cross
instances, over LISTEN/NOTIFY. The gateway names the messages that cross (`port`) on every server;
the instance itself (`Cluster`: leases, the bus) loads on first use, by the composition root only
when the store is PostgreSQL."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names
from .port import Answer, Forwarded, Local, OwnerGone, Sink

if TYPE_CHECKING:
    from .node import Cluster, lasting_id

__getattr__ = lazy_names(__name__, {"node": ("Cluster", "lasting_id")})

__all__ = ["Answer", "Cluster", "Forwarded", "Local", "OwnerGone", "Sink", "lasting_id"]
