"""`cursor-byok models list|test`."""
from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from ..config import ModelConfig, ProviderKind, resolve_api_key
from .common import CommandError, echo, key_status, load_config, model_or_fail, run_async, table

if TYPE_CHECKING:
    from ..observability import ModelTestResult


def cmd_models_list(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    if not cfg.models:
        echo(f"no models configured in {cfg.source}")
        return 0
    rows = [("ID", "PROVIDER", "MODEL", "CONTEXT", "KEY")]
    for m in cfg.models:
        key = key_status(cfg, m)
        rows.append((m.id, ProviderKind(m.provider).value, m.model, str(m.context_window), "-" if not key.needed else "yes" if key.present else "no"))
    for line in table(rows):
        echo(line)
    return 0


async def run_model_test(model: ModelConfig, api_key: str, prompt: str, max_tokens: int) -> ModelTestResult:
    from ..http_client import streaming_client
    from ..observability import measure_model
    from ..providers import ProviderCall, make_provider

    async with streaming_client() as client:  # the provider bounds its own waits
        return await measure_model(make_provider(model, api_key, client), model, ProviderCall("test"), prompt=prompt, max_tokens=max_tokens)


def cmd_models_test(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    model = model_or_fail(cfg, args.model_id)
    api_key = resolve_api_key(cfg, model)
    from ..providers import ProviderError

    max_tokens = min(args.max_tokens, model.max_output_tokens)
    # A failure is this command's one line below; the server-style log of it would repeat it.
    provider_log = logging.getLogger("cursor_byok.providers")
    level = provider_log.level
    if args.log_level != "debug":
        provider_log.setLevel(logging.ERROR)
    try:
        result = run_async(run_model_test(model, api_key, args.prompt, max_tokens))
    except ProviderError as exc:
        raise CommandError(exc.explain()) from None
    finally:
        provider_log.setLevel(level)
    echo(result.text.strip() or "(no text)")
    echo(
        f"ttft: {'n/a' if result.ttft_ms is None else f'{result.ttft_ms:.0f} ms'}"
        f"  total: {result.total_ms:.0f} ms"
        f"  output tokens: {'n/a' if result.output_tokens is None else result.output_tokens}"
        f"  tokens/s: {'n/a' if result.tokens_per_second is None else f'{result.tokens_per_second:.1f}'}"
    )
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    models = sub.add_parser("models", help="configured models")
    models_sub = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    models_sub.add_parser("list", parents=[common], help="list configured models").set_defaults(handler=cmd_models_list)
    p = models_sub.add_parser("test", parents=[common], help="send one prompt and report latency and speed")
    p.add_argument("model_id", metavar="MODEL_ID")
    p.add_argument("--prompt", default="Say hello in five words.")
    p.add_argument("--max-tokens", type=int, default=256)
    p.set_defaults(handler=cmd_models_test)
