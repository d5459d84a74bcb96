"""`cursor-byok users` in-process, without a server: the arguments it refuses, budgets round the
config's default, a name taken once, a note when the server is not a team server yet."""
from __future__ import annotations

import json
from pathlib import Path


def test_names_and_amounts_are_checked_before_anything_is_stored(run_cli, write_config, tmp_path: Path) -> None:
    path = str(write_config(top='[team]\nenabled = true\nmonthly_budget_usd = 25.0\n\n'))
    for args in (("add", "bad name"), ("add", "-x"), ("add", "ok", "--budget", "-1"), ("add", "ok", "--budget", "nan")):
        result = run_cli("users", *args, "--config", path)
        assert result.code == 2, (args, result.err)
    assert not (tmp_path / "data" / "state.db").exists()
    assert run_cli("users", "list", "--config", path).out.startswith("no developers yet")


def test_budgets_round_the_default_and_a_name_is_taken_once(run_cli, write_config) -> None:
    path = str(write_config(top='[team]\nenabled = true\nmonthly_budget_usd = 25.0\n\n'))
    added = run_cli("users", "add", "ana", "--budget", "7.5", "--config", path)
    assert added.code == 0 and added.err == "" and len(added.out.splitlines()) == 2
    assert run_cli("users", "add", "ana", "--config", path).code == 1

    def budget() -> float:
        [ana] = json.loads(run_cli("users", "list", "--json", "--config", path).out)
        return ana["budget_usd"]

    assert budget() == 7.5
    assert run_cli("users", "budget", "ana", "default", "--config", path).out.strip() == "developer ana: monthly budget $25.0000 (the config's default)"
    assert budget() == 25.0
    assert run_cli("users", "budget", "ana", "0", "--config", path).out.strip() == "developer ana: monthly budget no limit"
    assert budget() == 0.0
    assert run_cli("users", "budget", "ana", "lots", "--config", path).code == 2
    assert run_cli("users", "budget", "bo", "1", "--config", path).code == 1  # no such developer
    table = run_cli("users", "list", "--config", path).out
    assert table.splitlines()[0].split()[:4] == ["NAME", "CREATED", "REVOKED", "BUDGET/MONTH"] and "ana" in table


def test_a_server_not_in_team_mode_is_said_so(run_cli, write_config) -> None:
    result = run_cli("users", "add", "ana", "--config", str(write_config()))
    assert result.code == 0 and "not a team server yet" in result.err
