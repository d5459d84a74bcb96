"""The captures in `tests/fixtures/captures/` replay against today's server with no divergence:
each was recorded from a real client session (`sessions.py`: the scripted IDE; `sdk_session.py`:
Cursor's SDK through the interceptor), and each replays with its provider answering as it did then
(`provider.json`)."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients.sdk.client import API_KEY, NodeUnavailable
from tests.fakes import FakeProviderServer
from tests.harness.capture import replay
from tests.harness.server import ServerProcess

from .sdk_session import REPLIES, SDK_SESSION, STEPS, record
from .sessions import FIXTURES, NOTES, SESSIONS, enqueue, server_config
from .test_redaction import survivors

CAPTURED = sorted(p for p in FIXTURES.iterdir() if p.is_dir()) if FIXTURES.exists() else []


def test_every_recorded_session_has_its_fixture() -> None:
    assert {p.name for p in CAPTURED} >= {*SESSIONS, SDK_SESSION}


def session_content(replies: list[dict[str, Any]]) -> set[str]:
    """What a recorded session said that a redacted capture must not hold: the model's text, the
    tool arguments, the notes file, the prompts (the SDK's), the SDK's API key."""
    said = {piece.strip() for reply in replies for piece in reply.get("text", [])}
    said |= {str(value) for reply in replies for _, _, args in reply.get("tool_calls", []) for value in args.values()}
    return {*said, NOTES.strip(), *(step["prompt"] for step in STEPS), API_KEY} - {""}


@pytest.mark.parametrize("fixture", CAPTURED, ids=[p.name for p in CAPTURED])
def test_a_fixture_holds_no_content_and_no_secret(fixture: Path) -> None:
    """The fixtures are public: each was recorded redacted, and none of what its session said
    survives in it, in the JSON or in the raw bytes."""
    content = session_content(json.loads((fixture / "provider.json").read_text()))
    for path in sorted(fixture.glob("0*.json")):
        text = path.read_text()
        assert json.loads(text)["redacted"] is True, path.name
        found = {needle: spots for needle in content if (spots := survivors(text, needle))}
        assert not found, (path.name, found)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, shared_provider: FakeProviderServer) -> Iterator[ServerProcess]:
    with ServerProcess(server_config(tmp_path_factory.mktemp("fixtures") / "server", shared_provider)) as proc:
        yield proc


@pytest.mark.parametrize("fixture", CAPTURED, ids=[p.name for p in CAPTURED])
def test_a_fixture_replays_with_no_divergence(fixture: Path, server: ServerProcess, provider: FakeProviderServer) -> None:
    enqueue(provider, json.loads((fixture / "provider.json").read_text()))
    files = sorted(fixture.glob("0*.json"))
    result = replay([fixture], server.base_url)  # the folder, as a user passes it: provider.json is not a capture
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"no divergence ({len(files)} stream(s) replayed, 0 skipped)" in result.stdout, result.stdout


async def test_the_sdk_session_records_through_the_interceptor_and_replays(tmp_path: Path, server: ServerProcess, provider: FakeProviderServer) -> None:
    """The SDK fixture's recording, done again as `python -m tests.capture.sdk_session` does it:
    it still goes through the interceptor, yields the fixture's streams, and replays as recorded."""
    try:
        files = await record(into=tmp_path)
    except NodeUnavailable as exc:
        pytest.skip(f"CURSOR SDK CAPTURE NOT RUN: {exc}")
    kinds = [json.loads(f.read_text())["kind"] for f in files]
    assert kinds == [json.loads(f.read_text())["kind"] for f in sorted((FIXTURES / SDK_SESSION).glob("0*.json"))]
    enqueue(provider, REPLIES)
    result = replay([tmp_path / SDK_SESSION], server.base_url)
    assert result.returncode == 0 and f"no divergence ({len(files)} stream(s) replayed, 0 skipped)" in result.stdout, result.stdout
