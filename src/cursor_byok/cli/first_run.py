"""First run: `cursor-byok config init [--provider KIND]` writes a commented config, and `serve`
with no models says where the config is and what to run next."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import msgspec

from ..config import Config, ProviderKind, config_path
from .common import CommandError, echo, typed_command

log = logging.getLogger("cursor_byok.cli")

_HEADER = """\
# cursor-byok configuration. Check it with `cursor-byok config validate`.
# API keys never go in this file: they come from an environment variable (api_key_env) or from
# the secrets file (api_key_secret): secrets.toml in the cursor-byok config dir, chmod 600.

[server]
host = "127.0.0.1"  # loopback: only programs on this machine reach it
port = 8787

[proxy]
# The local proxy the Cursor IDE is pointed at (`cursor-byok cursor enable`).
enabled = false  # true: `cursor-byok serve` runs it too (same as --proxy)
port = 8788

# One [[models]] table per model Cursor offers; copy the table for more models.
"""

_MODEL = """\
[[models]]
# The name you pick in Cursor's model picker.
id = "{id}"
# openai-chat | openai-responses | anthropic
provider = "{kind}"
# {url_note}
base_url = "{base_url}"
# The provider's own model name.
model = "{model}"
# The key is read from this environment variable...
api_key_env = "{env}"
# ...or, instead, the key named "{secret}" in the secrets file:
# api_key_secret = "{secret}"
context_window = {window}
max_output_tokens = 32000
{option}
"""


class _Example(msgspec.Struct, frozen=True):
    id: str
    base_url: str
    url_note: str
    model: str
    window: int
    option: str  # one commented-out optional key


_EXAMPLES = {
    ProviderKind.OPENAI_CHAT: _Example(
        "byok-gpt", "https://api.openai.com/v1", "Any OpenAI-compatible API works (OpenRouter, vLLM, Ollama, ...).",
        "gpt-5", 400_000, '# Offer these reasoning efforts in Cursor:\n# efforts = ["low", "medium", "high"]',
    ),
    ProviderKind.OPENAI_RESPONSES: _Example(
        "byok-gpt", "https://api.openai.com/v1", "Requests go to <base_url>/responses.",
        "gpt-5", 400_000, '# Offer these reasoning efforts in Cursor:\n# efforts = ["low", "medium", "high"]',
    ),
    ProviderKind.ANTHROPIC: _Example(
        "byok-sonnet", "https://api.anthropic.com", "Requests go to <base_url>/v1/messages.",
        "claude-sonnet-4-5", 200_000, "# Extended thinking (0 = off):\n# thinking_budget_tokens = 8000",
    ),
}  # fmt: skip


def _key_variable(kind: ProviderKind) -> str:
    return "ANTHROPIC_API_KEY" if kind is ProviderKind.ANTHROPIC else "OPENAI_API_KEY"


def config_template(kind: ProviderKind) -> str:
    ex = _EXAMPLES[kind]
    secret = "anthropic" if kind is ProviderKind.ANTHROPIC else "openai"
    model = _MODEL.format(
        id=ex.id, kind=kind.value, url_note=ex.url_note, base_url=ex.base_url, model=ex.model,
        env=_key_variable(kind), secret=secret, window=ex.window, option=ex.option,
    )  # fmt: skip
    return _HEADER + "\n" + model


def cmd_config_init(args: argparse.Namespace) -> int:
    kind = ProviderKind(args.provider)
    path = config_path(args.config).absolute()
    if path.exists():
        raise CommandError(f"{path} already exists: edit it, or write a new one with `config init --config NEW_PATH`")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("x", encoding="utf-8") as out:
        out.write(config_template(kind))
    echo(f"wrote {path} ({kind.value})")
    me = typed_command()
    echo(f"next: export {_key_variable(kind)}=...  then  {me} config validate  and  {me} serve")
    return 0


def warn_if_no_models(cfg: Config, config_file: Path) -> None:
    """`serve` with no models still serves (everything goes upstream), but says how to add one."""
    if cfg.models:
        return
    path = config_file.absolute()
    state = "has no [[models]] table" if path.exists() else "does not exist"
    me = typed_command()
    log.warning(
        "no models configured: %s %s. Next: `%s config init` writes a commented config there, "
        "or `%s config import FILE` adds the models of another tool's config",
        path,
        state,
        me,
        me,
    )


def register(config_sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = config_sub.add_parser("init", parents=[common], help="write a commented config file for one provider")
    p.add_argument(
        "--provider",
        choices=[k.value for k in ProviderKind],
        default=ProviderKind.OPENAI_CHAT.value,
        help="the provider of the example model (default: openai-chat)",
    )
    p.set_defaults(handler=cmd_config_init)


__all__ = ["config_template", "register", "warn_if_no_models"]
