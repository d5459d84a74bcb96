"""The sessions recorded into `tests/fixtures/captures/`: the scripted IDE against the real server
with a fake provider. Each is a name, the provider's replies (kept beside the capture as
`provider.json`, so a replay gets the same answers from its provider) and what the IDE does.

    .venv/bin/python -m tests.capture.sessions      # record them all again (redacted)
"""
from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.capture import capturing
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"
MODEL = "byok-fixture"
NOTES = "fixture notes\n"  # notes.txt in every recorded session's workspace

Drive = Callable[[str, Path], Awaitable[None]]


def enqueue(provider: FakeProviderServer, replies: list[dict[str, Any]]) -> None:
    """`provider.json`'s replies on the fake provider: {"text": [pieces]} or {"tool_calls": [[id, name, args]]}."""
    for reply in replies:
        if "tool_calls" in reply:
            provider.enqueue(OPENAI_CHAT.tool_calls([CallSpec(i, name, [json.dumps(args)]) for i, name, args in reply["tool_calls"]]))
        else:
            provider.enqueue(OPENAI_CHAT.text(reply["text"]))


def server_config(data_dir: Path, provider: FakeProviderServer) -> ServerConfig:
    return ServerConfig(
        data_dir=data_dir,
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
        extra_server={"blob_ack_timeout_seconds": 3.0},
    )


async def _turns(base_url: str, workspace: Path, prompts: list[str], transport: str = "sse") -> None:
    ide = ScriptedIDE(base_url, workspace, transport=transport)
    try:
        conversation = uuid.uuid4().hex
        for prompt in prompts:
            log = await ide.turn(run_request(prompt, model=MODEL, conversation_id=conversation, workspace=str(workspace)))
            assert log.terminal is None, log.terminal
    finally:
        await ide.close()


SESSIONS: dict[str, tuple[list[dict[str, Any]], Drive]] = {
    "text-turn": ([{"text": ["Hello ", "from ", "the fake model."]}], lambda url, ws: _turns(url, ws, ["say hello"])),
    "tool-round-trip": (
        [
            {"text": ["First turn."]},
            {"tool_calls": [["c_read", "Read", {"path": "notes.txt"}]]},
            {"tool_calls": [["c_shell", "Shell", {"command": "echo fixture"}]]},
            {"text": ["Read the notes and ran echo."]},
        ],
        lambda url, ws: _turns(url, ws, ["hello", "read notes.txt, then run echo"]),
    ),
    "run-h2-text-turn": ([{"text": ["Over ", "HTTP/2."]}], lambda url, ws: _turns(url, ws, ["hello over h2"], transport="run")),
}


async def record(name: str, into: Path = FIXTURES) -> list[Path]:
    """Record one session into `into/<name>/` (its capture files and provider.json)."""
    replies, drive = SESSIONS[name]
    with tempfile.TemporaryDirectory() as tmp, FakeProviderServer() as provider:
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        (workspace / "notes.txt").write_text(NOTES)
        with ServerProcess(server_config(Path(tmp) / "server", provider)) as server:
            enqueue(provider, replies)
            async with capturing(server) as captured:
                await drive(server.base_url, workspace)
        target = into / name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for path in captured.files:
            shutil.copy(path, target / path.name)
        (target / "provider.json").write_text(json.dumps(replies, indent=1) + "\n")
        return sorted(target.glob("0*.json"))


if __name__ == "__main__":
    for session in SESSIONS:
        print(session, [p.name for p in asyncio.run(record(session))])
