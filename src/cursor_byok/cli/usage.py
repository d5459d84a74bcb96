"""`cursor-byok usage [--since 7d] [--by model|day|user]`: provider calls, tokens, cache hits and cost,
as the dashboard's overview counts them (read while the server may be running); `--by user`: per
developer of a team server ("-" for calls made for none)."""
from __future__ import annotations

import argparse
import json
import time
from typing import Any

from .common import CommandError, echo, load_config, run_async, table
from .conversations import database_exists, with_store


def _tokens(n: int) -> str:
    return f"{n:,}"


def _share(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}"


def cmd_usage(args: argparse.Namespace) -> int:
    from ..observability import since_ms, totals, usage

    cfg = load_config(args)
    try:
        since = since_ms(args.since, time.time_ns() // 1_000_000) if args.since else None
    except ValueError as exc:
        raise CommandError(str(exc), code=2) from None
    if not database_exists(cfg):
        echo(f"no usage yet ({cfg.database_path} does not exist)")
        return 0

    async def fetch(store: Any) -> list[dict[str, Any]]:
        return await usage(store, cfg, since_ms=since, by=args.by)

    rows = run_async(with_store(cfg, fetch))
    total = totals(rows)
    if args.json:
        echo(json.dumps({"rows": rows, "totals": total}, indent=2))
        return 0
    if not rows:
        echo("no provider calls" + (f" in the last {args.since}" if args.since else ""))
        return 0
    head = {"day": ("DAY",), "user": ("USER",)}.get(args.by, ())
    lines: list[tuple[str, ...]] = [(*head, "MODEL", "CALLS", "ERRORS", "INPUT", "OUTPUT", "CACHE READ", "CACHE WRITE", "REASONING", "CACHE HIT", "COST")]
    named = [{**r, "group": r["group"] or "-"} for r in rows] if args.by == "user" else rows  # "-": calls made for no developer
    for r in [*named, {**total, "group": "", "model_id": "total"}]:
        lines.append((
            *((r["group"],) if head else ()), r["model_id"], str(r["calls"]), str(r["errors"]),
            _tokens(r["input_tokens"]), _tokens(r["output_tokens"]), _tokens(r["cache_read_tokens"]),
            _tokens(r["cache_write_tokens"]), _tokens(r["reasoning_tokens"]), _share(r["cache_hit_rate"]), _money(r["cost"]),
        ))
    for line in table(lines):
        echo(line)
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("usage", parents=[common], help="provider calls, tokens, cache hits and cost")
    p.add_argument("--since", metavar="AGE", help="only the last AGE, e.g. 24h, 7d, 2w (default: everything kept)")
    p.add_argument(
        "--by", choices=("model", "day", "user"), default="model",
        help="one row per model, per day and model, or per developer and model (a team server's)",
    )
    p.add_argument("--json", action="store_true", help="the same numbers as JSON")
    p.set_defaults(handler=cmd_usage)
