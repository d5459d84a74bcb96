"""Who may use a team server, and how much: each instance's view of the developers (by token
digest), reread from the store every `team.refresh_seconds` and at once on SIGHUP (`cursor-byok
users` sends one to the server on its data dir) or when an unknown token comes (a developer just
added); and of what each has spent this month, reread every SPEND_REREAD_SECONDS (summing a
month of call records is the larger read).

A request's token is looked up by its SHA-256 in a dict: no stored secret is ever compared byte by
byte with what a client sends, and the digest of a random 256-bit token tells a timing observer
nothing about any token. A token found once is then looked up as sent (one dict read per request,
no hash; the dict's own hash is keyed with the process's secret) until the next reread; unknown
tokens are never kept. The store is read only off the
request path.

Spending is priced as `cursor-byok usage` prices it (the provider call records and the configured
prices), from the first of the month (UTC); between rereads each instance adds what its own calls
cost as they end, so a turn right after an expensive one sees it.
"""
from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..observability import usage
from ..protocol import ConnectError, provider_error
from .tokens import token_digest

log = logging.getLogger("cursor_byok.team")

# An unknown token rereads the developers at most this often (a stream of wrong tokens costs a
# small read four times a second, no more).
LEARN_SPACING_SECONDS = 0.25
# Each instance counts what its own calls cost as they end; what the others spent comes in with
# the next reread of the call records, at most this much later.
SPEND_REREAD_SECONDS = 30.0
MICRO_USD = 1_000_000


@dataclass(frozen=True, slots=True)
class Developer:
    name: str
    budget_usd: float  # per calendar month (UTC); 0: no limit


def month_start_ms(now: dt.datetime | None = None) -> int:
    """The first instant of the current calendar month (UTC), as wall-clock ms."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return int(now.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp() * 1000)


def budget_usd(budget_micro_usd: int | None, config: Config) -> float:
    """A developer's own budget, or the config's default."""
    return budget_micro_usd / MICRO_USD if budget_micro_usd is not None else config.team.monthly_budget_usd


def micro_usd(usd: float | None) -> int | None:
    """A budget as the store keeps it (None: the config's default)."""
    return None if usd is None else round(usd * MICRO_USD)


@dataclass(slots=True)
class Spending:
    """One developer's provider calls over a time, summed over their models."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0  # USD; unpriced calls count 0


async def spending(store: Any, config: Config, since_ms: int) -> dict[str, Spending]:
    """Each developer's calls, tokens and cost since `since_ms`, as `usage --by user` counts them."""
    spent: dict[str, Spending] = {}
    for row in await usage(store, config, since_ms=since_ms, by="user"):
        if row["group"]:
            total = spent.setdefault(row["group"], Spending())
            total.calls += row["calls"]
            total.input_tokens += row["input_tokens"]
            total.output_tokens += row["output_tokens"]
            total.cost += row["cost"] or 0.0
    return spent


class TeamAccess:
    """See the module docstring. `refresh()` once before serving, then `keep_fresh()` runs."""

    def __init__(self, config: Config, store: Any) -> None:
        self.config = config  # replaced on SIGHUP (the default budget with it)
        self.store = store
        self._by_digest: dict[str, Developer] = {}
        self._by_token: dict[bytes, Developer] = {}  # tokens found since the last reread, as sent
        self._budgets: dict[str, float] = {}  # by name, of the developers not revoked
        self._spent: dict[str, float] = {}
        self._month = 0  # month_start_ms of what _spent counts
        self._spend_due = 0.0  # loop time of the next reread of the spending
        self._refreshing: asyncio.Task[None] | None = None
        self._learned_at = 0.0
        self._poked = asyncio.Event()  # reread now (SIGHUP)

    def identify(self, token: bytes) -> Developer | None:
        """The developer a presented token belongs to; None: no such token, or it was revoked."""
        found = self._by_token.get(token)
        if found is None:
            found = self._by_digest.get(token_digest(token))
            if found is not None:
                self._by_token[token] = found
        return found

    def spent(self, name: str, usd: float) -> None:
        """A call of `name`'s just cost `usd` (told by the recorder as it ends)."""
        self._spent[name] = self._spent.get(name, 0.0) + usd

    def over_budget(self, name: str | None) -> ConnectError | None:
        """Why a turn of `name`'s may not start (None: it may). Checked before the model is called."""
        if name is None:
            return None
        budget = self._budgets.get(name, self.config.team.monthly_budget_usd)
        spent = self._spent.get(name, 0.0) if self._month == month_start_ms() else 0.0
        if budget <= 0 or spent < budget:
            return None
        # With the details the IDE shows a provider's refusal by (its text, not a generic failure),
        # as a provider's rate limit ends a run; never retryable: a retry is refused the same way.
        shown = provider_error(
            f"developer {name!r} has used ${spent:,.4f} of a ${budget:,.4f} monthly budget this month; "
            f"the team's admin can raise it (cursor-byok users budget {name} USD)",
            retryable=False,
        )
        return ConnectError("resource_exhausted", shown.message, shown.details)

    async def refresh(self) -> None:
        """Reread the developers and this month's spending (one at a time; a caller during a
        reread waits for it)."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._reread())
        await asyncio.shield(self._refreshing)

    async def learn(self) -> bool:
        """An unknown token came: reread unless that was done a moment ago; whether it was reread."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._learned_at < LEARN_SPACING_SECONDS:
            return False
        self._learned_at = loop.time()
        return await self.try_refresh()

    async def try_refresh(self) -> bool:
        """`refresh`, whose failure is logged (the last view stays until a reread succeeds: a
        start, a request or the refresh loop never fails for it); whether it succeeded."""
        try:
            await self.refresh()
        except Exception as exc:  # noqa: BLE001 - see above
            log.warning("team developers not reread: %s", exc)
            return False
        return True

    def poke(self) -> None:
        """Reread now (SIGHUP: `cursor-byok users` changed something)."""
        self._poked.set()

    async def keep_fresh(self) -> None:
        """Reread every `team.refresh_seconds`, and when poked (a failed reread is logged, the
        next tries again)."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.team.refresh_seconds):
                    await self._poked.wait()
            self._poked.clear()
            await self.try_refresh()

    async def _reread(self) -> None:
        month, now = month_start_ms(), asyncio.get_running_loop().time()
        developers = await self.store.list_developers()
        if month != self._month or now >= self._spend_due:
            spent = await spending(self.store, self.config, month)
            self._spent, self._month, self._spend_due = {name: s.cost for name, s in spent.items()}, month, now + SPEND_REREAD_SECONDS
        self._by_digest = {
            d.token_sha256: Developer(d.name, budget_usd(d.budget_micro_usd, self.config)) for d in developers if d.revoked_at_ms is None
        }
        self._by_token = {}  # a revoked one must be hashed, and missed, again
        self._budgets = {d.name: d.budget_usd for d in self._by_digest.values()}
