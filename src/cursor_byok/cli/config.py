"""`cursor-byok config path|validate` (and `init`, `import` from their own modules)."""
from __future__ import annotations

import argparse

from ..config import ConfigError, config_path, resolve_api_key
from . import config_import, first_run
from .common import echo, load_config


def cmd_config_path(args: argparse.Namespace) -> int:
    echo(config_path(args.config).absolute())
    return 0


def cmd_config_validate(args: argparse.Namespace) -> int:
    cfg = load_config(args, must_exist=True)
    # A missing env var or a bad secrets file is a config problem too; report every model's.
    problems: list[str] = []
    for model in cfg.models:
        try:
            resolve_api_key(cfg, model)
        except ConfigError as exc:
            problems += [p for p in exc.problems if p not in problems]
    if problems:
        raise ConfigError(problems[0], problems)
    echo(f"ok: {cfg.source}")
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    config_cmd = sub.add_parser("config", help="config file helpers")
    config_sub = config_cmd.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    config_sub.add_parser("path", parents=[common], help="print the config file path in use").set_defaults(handler=cmd_config_path)
    config_sub.add_parser("validate", parents=[common], help="validate the config file and its secrets").set_defaults(handler=cmd_config_validate)
    first_run.register(config_sub, common)
    config_import.register(config_sub, common)
