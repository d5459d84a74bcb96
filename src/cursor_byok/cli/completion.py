"""`cursor-byok completion bash|zsh|fish`: a shell completion script, made from the parser itself."""
from __future__ import annotations

import argparse

from .common import echo

SHELLS = ("bash", "zsh", "fish")


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab  # only this command needs it

    from . import build_parser

    echo(shtab.complete(build_parser(), shell=args.shell).rstrip("\n"))
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script (bash: `cursor-byok completion bash > ~/.local/share/bash-completion/completions/cursor-byok`)",
    )
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.set_defaults(handler=cmd_completion)
