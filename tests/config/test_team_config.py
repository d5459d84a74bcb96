"""The [team] table: off by default, validated like every other key."""
from __future__ import annotations

import pytest

from cursor_byok.config import ConfigError, parse


def test_team_mode_is_off_by_default() -> None:
    team = parse({}).team
    assert (team.enabled, team.monthly_budget_usd, team.refresh_seconds) == (False, 0.0, 2.0)


@pytest.mark.parametrize(("team", "extra", "says"), [
    ({"monthly_budget_usd": -1.0}, {}, "team.monthly_budget_usd: must be >= 0"),
    ({"refresh_seconds": 0.0}, {}, "team.refresh_seconds: must be > 0"),
    ({"enabled": True}, {"observability": {"enabled": False}}, "team.enabled: a team server counts"),
    ({"enable": True}, {}, "team.enable"),
])
def test_team_problems_name_the_key(team: dict[str, object], extra: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse({"team": team, **extra})
    assert any(says in problem for problem in caught.value.problems), caught.value.problems


def test_a_team_server_keeps_provider_call_records_a_month_at_least() -> None:
    day = 86_400_000
    assert parse({}).retention_ages_ms()["calls"] == 30 * day
    assert parse({"team": {"enabled": True}}).retention_ages_ms()["calls"] == 32 * day
    assert parse({"team": {"enabled": True}, "retention": {"calls_days": 90}}).retention_ages_ms()["calls"] == 90 * day
    assert parse({"team": {"enabled": True}, "retention": {"calls_days": 0}}).retention_ages_ms()["calls"] == 0  # forever
