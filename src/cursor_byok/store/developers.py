"""A team server's developers: name, the SHA-256 of their token (never the token), when they were
added and revoked, their own monthly budget. Written by `cursor-byok users` (rarely, awaited), read
by each instance's team access every few seconds."""
from __future__ import annotations

import msgspec

from .core import StoreCore
from .ops import RowWrite, Stage


class DeveloperRecord(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    token_sha256: str  # hex
    created_at_ms: int
    revoked_at_ms: int | None = None
    budget_micro_usd: int | None = None  # None: the config's default


_FIELDS = tuple(f.name for f in msgspec.structs.fields(DeveloperRecord))
_COLUMNS = ", ".join(_FIELDS)
INSERT_DEVELOPER = f"INSERT INTO developers ({_COLUMNS}) VALUES ({', '.join('?' * len(_FIELDS))})"
REVOKE_DEVELOPER = "UPDATE developers SET revoked_at_ms = ? WHERE name = ? AND revoked_at_ms IS NULL"
SET_BUDGET = "UPDATE developers SET budget_micro_usd = ? WHERE name = ?"


class DeveloperRecords(StoreCore):
    """Developers (a mixin of `Store`)."""

    async def list_developers(self) -> list[DeveloperRecord]:
        """Every developer, revoked ones too, in the order they were added."""
        rows = await self._read(f"SELECT {_COLUMNS} FROM developers ORDER BY created_at_ms, name", ())
        return [DeveloperRecord(**dict(zip(_FIELDS, r))) for r in rows]

    async def developer(self, name: str) -> DeveloperRecord | None:
        rows = await self._read(f"SELECT {_COLUMNS} FROM developers WHERE name = ?", (name,))
        return DeveloperRecord(**dict(zip(_FIELDS, rows[0]))) if rows else None

    async def add_developer(self, record: DeveloperRecord) -> None:
        """Durable once awaited; a name (or token hash) taken already fails the write."""
        row = tuple(getattr(record, name) for name in _FIELDS)
        await self._enqueue(RowWrite(f"add developer {record.name}", Stage.DEVELOPERS, INSERT_DEVELOPER, row))

    async def revoke_developer(self, name: str, at_ms: int) -> None:
        await self._enqueue(RowWrite(f"revoke developer {name}", Stage.DEVELOPERS, REVOKE_DEVELOPER, (at_ms, name)))

    async def set_developer_budget(self, name: str, budget_micro_usd: int | None) -> None:
        await self._enqueue(RowWrite(f"set budget of developer {name}", Stage.DEVELOPERS, SET_BUDGET, (budget_micro_usd, name)))
