"""Every finished run leaves one INFO line on the server (conversation, model, time to first output,
tokens, tool calls, outcome, error code) and its usage in the store."""
from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, UsageSpec
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.server import ServerProcess

from .conftest import MODEL


def run_lines(server: ServerProcess, conversation_id: str, wait: float = 5.0) -> list[dict[str, str]]:
    """The `run finished` lines of one conversation, as key=value fields (waits for the first)."""
    deadline = time.monotonic() + wait
    while True:
        lines = [
            line for line in server.log().splitlines()
            if "cursor_byok.runs: run finished" in line and f"conversation_id={conversation_id}" in line
        ]
        if lines or time.monotonic() > deadline:
            return [dict(field.split("=", 1) for field in line.split() if "=" in field) for line in lines]
        time.sleep(0.05)


async def test_a_successful_run_is_one_info_line(
    server: ServerProcess, provider: FakeProviderServer, ide: ScriptedIDE, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("remember the milk\n")
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("c1", "Read", [json.dumps({"path": str(workspace / "notes.txt")})])], usage=UsageSpec(input=40, output=7)),
        OPENAI_CHAT.text(["done"], usage=UsageSpec(input=60, output=3)),
    )
    conversation_id = uuid.uuid4().hex
    log = await ide.turn(run_request("read my notes", model=MODEL, conversation_id=conversation_id))
    assert log.terminal is None and log.text == "done"
    [fields] = run_lines(server, conversation_id)
    assert fields["model"] == MODEL and fields["outcome"] == "succeeded" and fields["error_code"] == "None"
    assert (fields["input_tokens"], fields["output_tokens"], fields["tool_calls"]) == ("100", "10", "1")
    assert int(fields["ttft_ms"]) >= 0 and int(fields["duration_ms"]) >= int(fields["ttft_ms"])
    assert " INFO " in next(line for line in server.log().splitlines() if f"conversation_id={conversation_id}" in line and "run finished" in line)


async def test_a_failed_run_names_its_error_code(server: ServerProcess, provider: FakeProviderServer, ide: ScriptedIDE) -> None:
    provider.enqueue(OPENAI_CHAT.auth_error())
    conversation_id = uuid.uuid4().hex
    log = await ide.turn(run_request("hi", model=MODEL, conversation_id=conversation_id))
    assert log.terminal is not None
    [fields] = run_lines(server, conversation_id)
    assert (fields["outcome"], fields["error_code"], fields["ttft_ms"], fields["tool_calls"]) == ("failed", "unauthenticated", "None", "0")
