"""A command line naming its command is parsed by that command's parser alone (building all ~50 of
them was ~10 ms of every start, `serve`'s included), with the same result as the whole parser's."""
from __future__ import annotations

import argparse

import pytest

from cursor_byok import cli


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    return [name for action in parser._actions if isinstance(action, argparse._SubParsersAction) for name in action.choices]


def test_each_command_is_parsed_by_its_own_group_alone() -> None:
    every = _commands(cli.build_parser())
    for command in every:
        own = _commands(cli.build_parser(command))
        assert command in own and len(own) <= 2 < len(every), command  # `capture` adds `replay` too


@pytest.mark.parametrize(
    "argv",
    [
        ["serve"],
        ["serve", "--port", "9000", "--no-proxy", "-v"],
        ["--config", "serve", "serve", "--host", "0.0.0.0"],
        ["--config=/x.toml", "--log-level", "warning", "serve", "--log-format", "json"],
        ["--store-url", "postgresql://h/db", "conversations", "list"],
        ["-v", "models", "test", "fast"],
        ["capture", "start", "--with-content"],
        ["replay", "a.json", "--against", "http://127.0.0.1:1"],
        ["config", "init", "--provider", "anthropic"],
    ],
)
def test_a_command_line_parses_alike_with_its_own_parser_and_the_whole_one(argv: list[str]) -> None:
    command = cli.named_command(argv)
    assert command is not None and command in _commands(cli.build_parser())
    assert vars(cli.build_parser(command).parse_args(argv)) == vars(cli.build_parser().parse_args(argv))


@pytest.mark.parametrize(
    "argv",
    [[], ["--help"], ["--version"], ["--conf", "x.toml", "serve"], ["--log-level"], ["nonsense"], ["--", "serve"]],
)
def test_what_names_no_command_plainly_gets_the_whole_parser(argv: list[str]) -> None:
    """Help, an abbreviated option, no command or an unknown one: the whole parser answers (its
    help lists every command, its errors name them)."""
    assert cli.named_command(argv) is None
