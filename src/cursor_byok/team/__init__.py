"""Team access: developers' tokens (shown once, kept hashed), who a request is from, and each
developer's monthly budget (docs/team.md)."""
from __future__ import annotations

from .access import Developer, Spending, TeamAccess, budget_usd, micro_usd, month_start_ms, spending
from .tokens import new_token, token_digest

__all__ = ["Developer", "Spending", "TeamAccess", "budget_usd", "micro_usd", "month_start_ms", "new_token", "spending", "token_digest"]
