"""`conversations show|export|delete|prune` on what a real server stored after real turns."""
from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path

from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, UsageSpec
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

MODEL = "byok-transcript"


async def two_turns(server: ServerProcess, provider: FakeProviderServer, workspace: Path) -> tuple[str, str]:
    (workspace / "notes.txt").write_text("remember the milk\n")
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("c1", "Read", [json.dumps({"path": str(workspace / "notes.txt")})])], usage=UsageSpec(input=40, output=7)),
        OPENAI_CHAT.text(["You need ", "milk."], usage=UsageSpec(input=60, output=3)),
        OPENAI_CHAT.auth_error(),
    )
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        done, failed = uuid.uuid4().hex, uuid.uuid4().hex
        log = await ide.turn(run_request("what is in my notes?", model=MODEL, conversation_id=done))
        assert log.terminal is None
        log = await ide.turn(run_request("hi", model=MODEL, conversation_id=failed))
        assert log.terminal is not None and log.terminal.code == "unauthenticated"
    finally:
        await ide.close()
    return done, failed


def test_transcript_export_delete_and_prune(run_cli, tmp_path: Path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with FakeProviderServer() as provider:
        config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")])
        with ServerProcess(config) as server:
            done, failed = asyncio.run(two_turns(server, provider, workspace))
            cfg = ("--config", str(server.config_path))

            shown = run_cli("conversations", "show", done[:10], *cfg)
            assert shown.code == 0, shown.err
            lines = shown.out.splitlines()
            assert lines[0].startswith(f"conversation {done}: model {MODEL}, mode AGENT_MODE_AGENT, created ")
            body = [line for line in lines[1:] if not line.startswith("  context:")]
            assert body[:4] == [
                "  user: what is in my notes?",
                f"  tool call Read {json.dumps({'path': str(workspace / 'notes.txt')})}",
                "  tool result Read: " + body[2].removeprefix("  tool result Read: "),
                "  assistant: You need milk.",
            ]
            assert "remember the milk" in body[2]
            assert re.fullmatch(r"run \S+: succeeded, \d+\.\d s, tokens in 100 out 10", body[4]), body[4]
            assert len(body) == 5

            failed_lines = [line for line in run_cli("conversations", "show", failed, *cfg).out.splitlines() if "context:" not in line]
            assert failed_lines[1] == "  user: hi" and len(failed_lines) == 3
            assert re.fullmatch(
                rf"run \S+: failed \(unauthenticated: the provider rejected the API key for model {MODEL} \(HTTP 401\).*\), \d+\.\d s",
                failed_lines[-1],
            ), failed_lines[-1]

            out = tmp_path / "export.json"
            assert run_cli("conversations", "export", done[:10], "--out", str(out), *cfg).code == 0
            exported = json.loads(out.read_text())
            kinds = [e["payload"]["kind"] for e in exported["events"]]
            assert "user" in kinds and "assistant" in kinds and "tool_results" in kinds
            assistant = [e["payload"]["message"] for e in exported["events"] if e["payload"]["kind"] == "assistant"]
            assert assistant[-1]["parts"][-1] == {"type": "text", "text": "You need milk."}
            assert exported["usage"][0]["output_tokens"] == 10 and exported["runs"][0]["outcome"] == "succeeded"
            assert exported["checkpoints"] and isinstance(exported["checkpoints"][-1]["state"], dict)

            deleted = run_cli("conversations", "delete", done[:10], *cfg)
            assert (deleted.code, deleted.out.strip()) == (0, f"deleted 1 conversation(s): {done}")
            assert run_cli("conversations", "show", done, *cfg).code == 1

            pruned = run_cli("conversations", "prune", "--older-than", "0s", *cfg)
            assert (pruned.code, pruned.out.strip()) == (0, f"deleted 1 conversation(s): {failed}")
            assert json.loads(run_cli("conversations", "list", "--json", *cfg).out) == {"conversations": [], "next": None}
            bad = run_cli("conversations", "prune", "--older-than", "soon", *cfg)
            assert bad.code == 2 and "not an age: 'soon' (use e.g. 30d, 12h, 2w)" in bad.err
