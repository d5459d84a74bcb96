"""`cursor-byok models list|test`."""
from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import msgspec

from ..config import ModelConfig, ProviderKind, resolve_api_key
from . import doctor
from .common import PROG, CommandError, echo, key_status, load_config, model_or_fail, run_async, table, typed_command

if TYPE_CHECKING:
    from ..observability import ModelTestResult
    from ..providers import ProviderCall

T = TypeVar("T")


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


# `models test` answers within this many seconds by default, every retry included: a stalled
# endpoint is a quick "no answer", not minutes of silence.
DEFAULT_TEST_TIMEOUT = 15.0


async def run_model_test(model: ModelConfig, api_key: str, prompt: str, max_tokens: int, call: ProviderCall) -> ModelTestResult:
    from ..http_client import streaming_client
    from ..observability import measure_model
    from ..providers import make_provider

    async with streaming_client() as client:  # the provider bounds its own waits
        return await measure_model(make_provider(model, api_key, client), model, call, prompt=prompt, max_tokens=max_tokens)


@dataclass(frozen=True, slots=True)
class ProbeBudget:
    """`models test`'s time: `total` seconds for every try and the pauses between them."""

    total: float
    tries: int
    per_try: float

    @classmethod
    def split(cls, total: float) -> ProbeBudget:
        from ..providers import RetryPolicy

        policy = RetryPolicy()
        pauses = sum(min(policy.max_delay, policy.base_delay * 2**i) for i in range(policy.max_retries))
        tries = policy.max_retries + 1
        # every try and pause fits in `total`: what is left for the last try is cut by the cap
        return cls(total, tries, max(0.1, round((total - pauses) / tries, 1)))

    def bounded(self, model: ModelConfig) -> ModelConfig:
        return msgspec.structs.replace(
            model,
            request_timeout_seconds=min(model.request_timeout_seconds, self.per_try),
            idle_timeout_seconds=min(model.idle_timeout_seconds, self.total),
        )


class _RetryEcho(logging.Handler):
    """Each retry of the provider call as one line on stderr, as it happens."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "retry", None) is not None:
            echo(f"{PROG}: model {getattr(record, 'model', '?')}: {record.getMessage()}", file=sys.stderr)


def cmd_models_test(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    model = model_or_fail(cfg, args.model_id)
    api_key = resolve_api_key(cfg, model)
    if args.timeout <= 0:
        raise CommandError("--timeout: must be > 0 seconds", code=2)
    from ..providers import IdleTimeoutError, ProviderCall, ProviderError

    budget = ProbeBudget.split(args.timeout)
    call = ProviderCall("test")
    max_tokens = min(args.max_tokens, model.max_output_tokens)
    # A failure is this command's one line below and each retry one line as it comes; the
    # server-style log lines of them would repeat them.
    provider_log = logging.getLogger("cursor_byok.providers")
    level, propagate = provider_log.level, provider_log.propagate
    retries = _RetryEcho()
    if args.log_level != "debug":
        provider_log.setLevel(logging.WARNING)
        provider_log.propagate = False
        provider_log.addHandler(retries)
    try:
        result = run_async(_within(budget.total, run_model_test(budget.bounded(model), api_key, args.prompt, max_tokens, call)))
    except (TimeoutError, IdleTimeoutError):
        if call.first_event_ns:  # it answers, only not all of it in time
            raise CommandError(
                f"model {model.id}: the answer started but did not end within {budget.total:g} s "
                "(--timeout waits longer, --max-tokens asks for less)"
            ) from None
        raise CommandError(
            f"model {model.id}: no answer from {doctor.base_url(model)} within {budget.total:g} s ({budget.tries} tries): "
            f"check that it is up (`{typed_command()} doctor --check-providers`), or wait longer with --timeout"
        ) from None
    except ProviderError as exc:
        raise CommandError(exc.explain()) from None
    finally:
        provider_log.removeHandler(retries)
        provider_log.setLevel(level)
        provider_log.propagate = propagate
    echo(result.text.strip() or "(no text)")
    echo(
        f"ttft: {'n/a' if result.ttft_ms is None else f'{result.ttft_ms:.0f} ms'}"
        f"  total: {result.total_ms:.0f} ms"
        f"  output tokens: {'n/a' if result.output_tokens is None else result.output_tokens}"
        f"  tokens/s: {'n/a' if result.tokens_per_second is None else f'{result.tokens_per_second:.1f}'}"
    )
    return 0


async def _within(seconds: float, work: Awaitable[T]) -> T:
    import asyncio

    async with asyncio.timeout(seconds):
        return await work


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    models = sub.add_parser("models", help="configured models")
    models_sub = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    models_sub.add_parser("list", parents=[common], help="list configured models").set_defaults(handler=cmd_models_list)
    p = models_sub.add_parser("test", parents=[common], help="send one prompt and report latency and speed")
    p.add_argument("model_id", metavar="MODEL_ID", help="one of the config's [[models]] ids")
    p.add_argument("--prompt", default="Say hello in five words.", help="what to send (default: %(default)r)")
    p.add_argument("--max-tokens", type=int, default=256, help="the answer's length limit (default: %(default)s)")
    p.add_argument(
        "--timeout", type=float, default=DEFAULT_TEST_TIMEOUT, metavar="SECONDS",
        help="give up after this long, retries included (default: %(default)g)",
    )
    p.set_defaults(handler=cmd_models_test)
