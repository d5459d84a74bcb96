"""Cursor's own agent SDK (`@cursor/sdk`) against the real server, timed as its user sees it:

- turn end: from the last text of a turn to the SDK seeing its run finished (the SDK marks a run
  finished only when the stream ends);
- next prompt after a cancel: the SDK cancels by closing the stream; from the second prompt's
  send to its first text, while the cancelled turn's provider stream is still open.

Each is measured ROUNDS times on one server with the server's default settings, fake provider and
a loopback stand-in for Cursor's backend (tests/clients/sdk):

    .venv/bin/python -m pytest -q -s -p no:randomly -p no:timeout benchmarks/test_clients.py    (BENCH_ROUNDS=5)
"""
from __future__ import annotations

import os
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.sdk.client import NodeUnavailable, SdkDriver, find_node, install_sdk, stand_in_upstream
from tests.fakes import OPENAI_CHAT, FakeProviderServer, RecordedRequest, Reply
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
MODEL = "byok-bench"


_STALLED: set[str] = set()


def _answer(request: RecordedRequest) -> Reply:
    """For a prompt asking for a long task, the first time: one piece, then the provider holds the
    stream (a run retried after it gives up gets a short answer). Else a short answer."""
    last = str(request.json()["messages"][-1])
    if "long task" in last and last not in _STALLED:
        _STALLED.add(last)
        stalled = OPENAI_CHAT.text(["working", " on it"])
        stalled.stall_after = 2  # the role-only chunk, then the first text: the SDK cancels on it
        return stalled
    return OPENAI_CHAT.text(["short answer"])


@pytest.fixture(scope="module")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SdkDriver]:
    try:
        node, package = find_node(), install_sdk()
    except NodeUnavailable as exc:
        pytest.skip(f"CURSOR SDK BENCHMARK NOT RUN: {exc}")
    base = tmp_path_factory.mktemp("sdk-bench")
    with FakeProviderServer() as provider, stand_in_upstream() as upstream:
        provider.respond_with(_answer)
        cfg = ServerConfig(
            data_dir=base / "data",
            models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
            upstream=upstream.url,
            continuation_window_seconds=None,
        )
        with ServerProcess(cfg) as server:
            home = base / "home"
            home.mkdir()
            yield SdkDriver(node=node, sdk=package, backend=server.base_url, home=home)


def _report(name: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    print(f"\n{name}: n={len(ordered)} median {statistics.median(ordered):.0f} ms, min {ordered[0]:.0f}, max {ordered[-1]:.0f}")


def test_turn_end(sdk: SdkDriver, tmp_path: Path) -> None:
    run = sdk.run(MODEL, tmp_path, [{"prompt": f"question {i}"} for i in range(ROUNDS)], timeout=60 + 30 * ROUNDS)
    _report("last text -> run finished", [run.end_ms(i) for i in range(ROUNDS)])


def test_next_prompt_after_cancel(sdk: SdkDriver, tmp_path: Path) -> None:
    samples = []
    for i in range(ROUNDS):
        workspace = tmp_path / str(i)
        workspace.mkdir()
        steps = [{"prompt": f"a long task {i}", "cancelOn": "text"}, {"prompt": "something else"}]
        run = sdk.run(MODEL, workspace, steps, timeout=300)
        assert run.result(1).get("result") == "short answer", run.result(1)
        samples.append(run.first_text_ms(1))
    _report("next prompt after cancel: send -> first text", samples)
