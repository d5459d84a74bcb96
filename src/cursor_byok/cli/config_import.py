"""`cursor-byok config import PATH [--dry-run]`: models from another tool's config file."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..config import config_path, load_secrets, parse, read_toml_text, secrets_path
from .common import CommandError, echo, load_config


def cmd_config_import(args: argparse.Namespace) -> int:
    # Imported here: YAML and TOML writing are needed by this command only.
    from ..config_import import Outcome, SourceError, apply, plan_import, read_foreign_config, validate

    source = Path(args.path).expanduser()
    try:
        foreign = read_foreign_config(source, os.environ)
    except SourceError as exc:
        raise CommandError(str(exc), code=2) from None
    target = config_path(args.config).absolute()
    # A broken config is reported as it is, before anything is written; a missing one is created.
    existing = load_config(args) if target.exists() else parse({}, str(target))
    secrets_file = secrets_path(existing)
    config_text = read_toml_text(target) if target.exists() else ""
    known_secrets = load_secrets(existing) if secrets_file.exists() else {}  # also checks its mode
    secrets_text = read_toml_text(secrets_file, "secrets_file") if secrets_file.exists() else ""
    plan = plan_import(foreign, source, existing, target, secrets_file, known_secrets)
    validate(plan, config_text, secrets_text)

    echo(f"{source}: {foreign.format.value}")
    for note in foreign.notes:
        echo(f"note: {note}")
    for report in plan.reports:
        echo(f"  {report.outcome.value:<8} {report.id}: {report.detail}")
        for note in report.notes:
            echo(f"           note: {note}")
    if args.dry_run:
        if plan.tables:
            echo(f"\n# would add to {target}:")
            echo(plan.config_toml().rstrip("\n"))
        if plan.secrets:
            echo(f"\n# would add to {secrets_file} (mode 0600):")
            echo(plan.secrets_toml(masked=True).rstrip("\n"))
    else:
        apply(plan, config_text, secrets_text)
    skipped = sum(r.outcome is Outcome.SKIPPED for r in plan.reports)
    summary = f"imported {plan.imported}, skipped {skipped}, total {len(plan.reports)}"
    if args.dry_run:
        echo(f"\n{summary} (dry run: nothing written)")
    else:
        written = [str(p) for p, changed in ((target, plan.tables), (secrets_file, plan.secrets)) if changed]
        echo(f"{summary}" + (f"; wrote {', '.join(written)}" if written else ""))
    unset = [name for name in dict.fromkeys(t.get("api_key_env", "") for t in plan.tables) if name and not os.environ.get(name)]
    if unset:
        exports = " ".join(f"{name}=<your key>" for name in unset)
        echo(f"next: export {exports} in the shell that runs the server, then `cursor-byok config validate`")
    return 0


def register(config_sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = config_sub.add_parser(
        "import",
        parents=[common],
        help="add models from another tool's config (reference app YAML, LiteLLM config.yaml, claude-code-router config.json)",
    )
    p.add_argument("path", metavar="PATH", help="the other tool's config file")
    p.add_argument("--dry-run", action="store_true", help="print what would be written (keys masked); write nothing")
    p.set_defaults(handler=cmd_config_import)
