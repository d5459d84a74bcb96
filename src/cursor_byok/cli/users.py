"""`cursor-byok users add|list|revoke|budget`: a team server's developers (docs/team.md). A token
is shown once, at `add`, and only its SHA-256 is stored. A running server on this data dir is told
at once (SIGHUP); other instances on the same database reread within `team.refresh_seconds`."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import signal
import sys
import time
from typing import Any

from ..config import Config
from .common import CommandError, echo, load_config, run_async, table
from .conversations import database_exists, with_store

# A name is a label in /metrics and in `usage`: short, printable, no spaces.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")


def _name(text: str) -> str:
    if not _NAME.fullmatch(text):
        raise argparse.ArgumentTypeError("1 to 64 of A-Z a-z 0-9 . _ @ - (starting with a letter or digit)")
    return text


def _usd(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an amount in USD: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError("a budget is an amount in USD >= 0 (0: no limit)")
    return value


def _usd_or_default(text: str) -> float | None:
    """A budget, or "default" (None): the config's."""
    return None if text == "default" else _usd(text)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _tell_server(cfg: Config) -> None:
    """The server on this data dir rereads its developers now (its SIGHUP)."""
    from ..instance import lock_holder

    holder = lock_holder(cfg.data_path)
    if holder is None or holder.pid is None or holder.command != "serve" or not hasattr(signal, "SIGHUP"):
        return
    try:
        os.kill(holder.pid, signal.SIGHUP)
    except OSError:
        pass  # gone meanwhile: the next start reads the developers anyway


def _write(cfg: Config, action: Any) -> Any:
    result = run_async(with_store(cfg, action, writes=True))
    _tell_server(cfg)
    return result


async def _known(store: Any, name: str) -> Any:
    found = await store.developer(name)
    if found is None:
        raise CommandError(f"no developer named {name!r} (see: cursor-byok users list)")
    return found


def cmd_users_add(args: argparse.Namespace) -> int:
    from ..store import DeveloperRecord
    from ..team import micro_usd, new_token, token_digest

    cfg = load_config(args)
    token = new_token()

    async def add(store: Any) -> None:
        if await store.developer(args.name) is not None:
            raise CommandError(f"a developer named {args.name!r} exists already (revoked names stay taken)")
        await store.add_developer(DeveloperRecord(
            name=args.name, token_sha256=token_digest(token.encode()), created_at_ms=_now_ms(), budget_micro_usd=micro_usd(args.budget),
        ))

    _write(cfg, add)
    echo(f"added developer {args.name}; their token (shown this once, only its hash is kept):")
    echo(token)
    if not cfg.team.enabled:
        echo("note: this server is not a team server yet: set [team] enabled = true in its config", file=sys.stderr)
    return 0


def cmd_users_revoke(args: argparse.Namespace) -> int:
    cfg = load_config(args)

    async def revoke(store: Any) -> None:
        found = await _known(store, args.name)
        if found.revoked_at_ms is None:
            await store.revoke_developer(args.name, _now_ms())

    _write(cfg, revoke)
    echo(f"revoked developer {args.name}: their token is refused from now on")
    return 0


def cmd_users_budget(args: argparse.Namespace) -> int:
    from ..team import micro_usd

    cfg = load_config(args)
    usd = args.usd

    async def budget(store: Any) -> None:
        await _known(store, args.name)
        await store.set_developer_budget(args.name, micro_usd(usd))

    _write(cfg, budget)
    limit = cfg.team.monthly_budget_usd if usd is None else usd
    echo(f"developer {args.name}: monthly budget {_budget(limit)}" + (" (the config's default)" if usd is None else ""))
    return 0


def cmd_users_list(args: argparse.Namespace) -> int:
    from ..team import Spending, budget_usd, month_start_ms, spending

    cfg = load_config(args)
    if not database_exists(cfg):
        echo(f"no developers yet ({cfg.database_path} does not exist)")
        return 0

    async def fetch(store: Any) -> tuple[list[Any], dict[str, Spending]]:
        return await store.list_developers(), await spending(store, cfg, month_start_ms())

    developers, spent = run_async(with_store(cfg, fetch))
    rows = []
    for d in developers:
        month = spent.get(d.name, Spending())
        rows.append({
            "name": d.name, "created_at_ms": d.created_at_ms, "revoked_at_ms": d.revoked_at_ms,
            "budget_usd": budget_usd(d.budget_micro_usd, cfg), "calls_this_month": month.calls,
            "input_tokens_this_month": month.input_tokens, "output_tokens_this_month": month.output_tokens,
            "cost_this_month": month.cost,
        })
    if args.json:
        echo(json.dumps(rows, indent=2))
        return 0
    if not rows:
        echo("no developers (add one: cursor-byok users add NAME)")
        return 0
    lines = [("NAME", "CREATED", "REVOKED", "BUDGET/MONTH", "CALLS", "INPUT", "OUTPUT", "COST THIS MONTH")]
    for r in rows:
        lines.append((
            r["name"], _when(r["created_at_ms"]), _when(r["revoked_at_ms"]) if r["revoked_at_ms"] else "-",
            _budget(r["budget_usd"]), str(r["calls_this_month"]),
            f"{r['input_tokens_this_month']:,}", f"{r['output_tokens_this_month']:,}", f"${r['cost_this_month']:,.4f}",
        ))
    for line in table(lines):
        echo(line)
    return 0


def _budget(usd: float) -> str:
    return f"${usd:,.4f}" if usd else "no limit"


def _when(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("users", parents=[common], help="a team server's developers: tokens, budgets, usage")
    users = p.add_subparsers(dest="users_command", metavar="ACTION", required=True)
    add = users.add_parser("add", parents=[common], help="add a developer and print their token (once)")
    add.add_argument("name", type=_name, metavar="NAME", help="the developer's name (in usage, /metrics and logs)")
    add.add_argument("--budget", type=_usd, metavar="USD", help="their monthly budget (default: team.monthly_budget_usd)")
    add.set_defaults(handler=cmd_users_add)
    ls = users.add_parser("list", parents=[common], help="developers, when added and revoked, budget and cost this month (never tokens)")
    ls.add_argument("--json", action="store_true", help="the same as JSON")
    ls.set_defaults(handler=cmd_users_list)
    revoke = users.add_parser("revoke", parents=[common], help="refuse a developer's token from now on")
    revoke.add_argument("name", type=_name, metavar="NAME", help="the developer whose token to refuse")
    revoke.set_defaults(handler=cmd_users_revoke)
    budget = users.add_parser("budget", parents=[common], help="set a developer's monthly budget in USD (0: no limit; 'default': the config's)")
    budget.add_argument("name", type=_name, metavar="NAME", help="the developer")
    budget.add_argument("usd", type=_usd_or_default, metavar="USD", help="USD per calendar month (UTC), 0 for no limit, or 'default'")
    budget.set_defaults(handler=cmd_users_budget)
