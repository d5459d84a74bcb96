"""Background completions waiting to be delivered into a (parent) conversation, and their
consumption: the dedup between a completion awaited directly and its later notification."""
from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from typing import Any

from .core import StoreCore
from .ops import RowWrite, Stage, require_bytes
from .records import DeliveryRecord, DeliveryState

# A completion consumed before it was enqueued (awaited directly) stays consumed when the
# notification arrives later; that is the dedup.
ENQUEUE_DELIVERY = """
INSERT INTO background_deliveries (conversation_id, delivery_id, payload, state, created_at_ms)
VALUES (?, ?, ?, 'pending', ?)
ON CONFLICT (conversation_id, delivery_id) DO UPDATE SET
    payload = COALESCE(background_deliveries.payload, excluded.payload)
"""

CONSUME_DELIVERY = """
INSERT INTO background_deliveries (conversation_id, delivery_id, payload, state, created_at_ms,
    consumed_at_ms)
VALUES (?, ?, NULL, 'consumed', ?, ?)
ON CONFLICT (conversation_id, delivery_id) DO UPDATE SET
    state = 'consumed', consumed_at_ms = excluded.consumed_at_ms
WHERE background_deliveries.state = 'pending'
"""


class DeliveryRecords(StoreCore):
    """Background deliveries (a mixin of `Store`)."""

    def enqueue_delivery(
        self,
        conversation_id: str,
        delivery_id: str,
        payload: bytes,
        *,
        created_at_ms: int | None = None,
    ) -> asyncio.Future[None]:
        """Record a background completion for delivery into `conversation_id`. Enqueueing the same
        delivery_id again is a no-op; one already consumed stays consumed."""
        row = (conversation_id, delivery_id, require_bytes("delivery payload", payload),
               self._clock() if created_at_ms is None else created_at_ms)
        return self._enqueue(
            RowWrite(f"enqueue delivery {delivery_id}", Stage.DELIVERIES, ENQUEUE_DELIVERY, row)
        )

    def consume_delivery(
        self, conversation_id: str, delivery_id: str, *, consumed_at_ms: int | None = None
    ) -> asyncio.Future[None]:
        """Mark a delivery consumed; idempotent. Consuming before enqueueing is allowed and makes
        the later enqueue a no-op (the completion was taken another way)."""
        now = self._clock() if consumed_at_ms is None else consumed_at_ms
        row = (conversation_id, delivery_id, now, now)
        return self._enqueue(
            RowWrite(f"consume delivery {delivery_id}", Stage.DELIVERIES, CONSUME_DELIVERY, row)
        )

    async def pending_deliveries(self, conversation_id: str) -> list[DeliveryRecord]:
        """Deliveries not yet consumed, oldest first."""
        return await self._read_job(lambda conn: select_deliveries(conn, conversation_id, pending_only=True))


_DELIVERY_SELECT = (
    "SELECT conversation_id, delivery_id, state, created_at_ms, payload, consumed_at_ms "
    "FROM background_deliveries"
)


def select_deliveries(conn: sqlite3.Connection, conversation_id: str, *, pending_only: bool) -> list[DeliveryRecord]:
    pending = " AND state = 'pending'" if pending_only else ""
    rows = conn.execute(
        f"{_DELIVERY_SELECT} WHERE conversation_id = ?{pending} ORDER BY created_at_ms, delivery_id",
        (conversation_id,),
    )
    return [_delivery(r) for r in rows]


def _delivery(row: Sequence[Any]) -> DeliveryRecord:
    return DeliveryRecord(
        conversation_id=row[0],
        delivery_id=row[1],
        state=DeliveryState(row[2]),
        created_at_ms=row[3],
        payload=row[4],
        consumed_at_ms=row[5],
    )
