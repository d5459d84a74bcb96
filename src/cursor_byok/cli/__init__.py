"""`cursor-byok`: run the server, check the setup, and wire the Cursor IDE to it.

    cursor-byok serve [--config PATH] [--host H] [--port P] [--data-dir DIR] [--proxy|--no-proxy]
    cursor-byok connect [https://team.example] [--token-file FILE]
    cursor-byok doctor [--check-providers]
    cursor-byok config path|validate|init|import PATH
    cursor-byok models list|test MODEL_ID
    cursor-byok conversations list|show ID|export ID|delete ID|prune --older-than AGE
    cursor-byok db stats|backup FILE|vacuum
    cursor-byok usage [--since 7d] [--by model|day|user]
    cursor-byok users add NAME [--budget USD]|list|revoke NAME|budget NAME USD
    cursor-byok cursor enable|disable|status
    cursor-byok ca init [--rotate]|show|install
    cursor-byok service install|uninstall|status [--dry-run]
    cursor-byok completion bash|zsh|fish
    cursor-byok capture start [--with-content]|stop|status|list|show PATH|export [SESSION]
    cursor-byok replay FILE|DIR... --against URL

One module per command group; this one only composes them. A bad config is one line per problem on
stderr (`cursor-byok: <path>: <key>: <problem>`) and exit status 2; any other failure is one line
and exit status 1, never a traceback. Heavy subsystems (gateway, providers, store) are imported
inside the commands that need them.
"""
from __future__ import annotations

import gc

# What the command line imports lives as long as the process: the cycle collector would walk it
# over and over (~25 young passes, ~6 ms of every command's start). Paused while it is imported;
# `serve` pauses it again until its gateway is up (`main`).
_collecting = gc.isenabled()
gc.disable()
import argparse  # noqa: E402
import importlib  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402

from .. import __version__  # noqa: E402
from ..config import CONFIG_ENV, LOG_LEVELS, ConfigError  # noqa: E402
from .common import PROG, CommandError, echo, setup_logging  # noqa: E402

if _collecting:
    gc.freeze()  # out of every later pass: one young pass over all of it now would cost what pausing saved
    gc.enable()

# The command groups (modules), in the order the help lists them, and the group that registers
# each command: a command line naming one imports and builds that group alone (all of them, ~50
# parsers, are ~15 ms of every start, `serve`'s too).
COMMAND_GROUPS = (
    "serve", "connect", "doctor", "config", "models", "conversations", "usage", "users", "db", "cursor", "ca", "service",
    "capture", "completion",
)
COMMANDS = {group: group for group in COMMAND_GROUPS} | {"replay": "capture"}
# The options before a command (`_shared_options`): those that take a value, and those that do not.
_VALUE_OPTIONS = frozenset({"--config", "--store-url", "--log-format", "--log-level"})
_FLAGS = frozenset({"-v", "--verbose"})


def _shared_options(parser: argparse.ArgumentParser, default: object) -> None:
    """--config and the log options, given before a subcommand's name (`default` None) or after it
    (SUPPRESS: absent there, the value given before stays)."""
    parser.add_argument("--config", metavar="PATH", default=default, help=f"config file (default: ${CONFIG_ENV} or the user config dir)")
    parser.add_argument("--store-url", metavar="URL", default=default, help="the PostgreSQL database (postgresql://…) the store is in (default: the config's [store] url, else the SQLite file in the data dir)")
    parser.add_argument("--log-format", choices=("text", "json"), default=default, help="log line format (default: text, or the config's observability.log_format)")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default=default, help="least severe log lines shown (default: info, or the config's observability.log_level for serve)")
    parser.add_argument("-v", "--verbose", dest="log_level", action="store_const", const="debug", default=default, help="the same as --log-level debug")


def named_command(argv: Sequence[str]) -> str | None:
    """The command `argv` runs, when it says so plainly: after the shared options only, spelled out
    whole. None for help, the version, an abbreviated option, no command or an unknown one: the
    whole parser answers those (its help lists every command)."""
    args = iter(argv)
    for arg in args:
        if arg in _VALUE_OPTIONS:
            next(args, None)
        elif arg not in _FLAGS and arg.split("=", 1)[0] not in _VALUE_OPTIONS:
            return arg if arg in COMMANDS else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (`command`) one with that command's group alone (the others are not
    even imported)."""
    common = argparse.ArgumentParser(add_help=False)  # options every subcommand accepts after its name too
    _shared_options(common, argparse.SUPPRESS)
    parser = argparse.ArgumentParser(prog=PROG, description="Cursor's agent backend, run locally on your own model keys.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    _shared_options(parser, None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in COMMAND_GROUPS if command is None else (COMMANDS[command],):
        importlib.import_module(f"{__name__}.{group}").register(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = named_command(argv)
    if command != "serve":
        return _run(argv, command)
    # `serve`'s start checks make what lives as long as the server too (its command group, the
    # config, the lock): the collector stays paused until its gateway is up (`gateway.serve` turns
    # it on then), and is on again however the command ends.
    gc.disable()
    try:
        return _run(argv, command)
    finally:
        gc.enable()


def _run(argv: list[str], command: str | None) -> int:
    parser = build_parser(command)
    args = parser.parse_args(argv)
    if args.command is None:  # no command: what a new user needs is the list of them
        parser.print_help()
        return 0
    setup_logging(args.log_format or "text", args.log_level or "info")
    try:
        return int(args.handler(args) or 0)
    except ConfigError as exc:
        for problem in exc.problems:
            echo(f"{PROG}: {problem}", file=sys.stderr)
        return 2
    except CommandError as exc:
        echo(f"{PROG}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`cursor-byok ca show | head -2`): nothing more to say to it. Point
        # stdout at /dev/null so the interpreter's final flush does not fail a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:  # a bug: still one line for the user, the traceback only when asked
        logging.getLogger("cursor_byok.cli").debug("unexpected error", exc_info=exc)
        echo(
            f"{PROG}: unexpected {type(exc).__name__}: {exc} "
            "(a bug; `--log-level debug` shows where, please report it)",
            file=sys.stderr,
        )
        return 1


__all__ = ["CommandError", "build_parser", "main", "named_command"]
