"""Several instances on one PostgreSQL database: conversation leases and the requests that cross
instances, over LISTEN/NOTIFY. Loaded by the composition root only when the store is PostgreSQL."""
from __future__ import annotations

from .node import Cluster, lasting_id
from .port import Answer, Forwarded, Local, OwnerGone, Sink

__all__ = ["Answer", "Cluster", "Forwarded", "Local", "OwnerGone", "Sink", "lasting_id"]
