"""Capture and replay through the real server: `cursor-byok capture start|stop|list|show|export`
records the IDE's agent RPCs at the gateway, `cursor-byok replay` plays a capture's client side
against a server and diffs its answers, and a server that drops one frame kind is caught."""
from __future__ import annotations

import json
import tarfile
import uuid
from pathlib import Path

import httpx
import pytest

from tests.e2e.edge_support import EdgeServerConfig
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer
from tests.harness.capture import (
    DroppingProxy,
    capture_files,
    capturing,
    replay,
)
from tests.harness.ide import BIDI_APPEND, GRPC_WEB_PROTO, ScriptedIDE, envelope, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, free_port

MODEL = "byok-capture"


def config(tmp_path: Path, provider: FakeProviderServer, name: str = "server") -> ServerConfig:
    return ServerConfig(
        data_dir=tmp_path / name,
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
        extra_server={"blob_ack_timeout_seconds": 3.0},
    )


def script(provider: FakeProviderServer, workspace: Path) -> None:
    """A text turn, then a tool round trip (Read, then Shell) with its KV acks."""
    provider.enqueue(
        OPENAI_CHAT.text(["Hello ", "there."]),
        OPENAI_CHAT.tool_calls([CallSpec("c_read", "Read", [json.dumps({"path": str(workspace / "notes.txt")})])]),
        OPENAI_CHAT.tool_calls([CallSpec("c_shell", "Shell", [json.dumps({"command": "echo shell-said-hi"})])]),
        OPENAI_CHAT.text(["Read it and ran it."]),
    )


async def session(base_url: str, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("line one\nline two\n")
    ide = ScriptedIDE(base_url, workspace)
    try:
        conversation = uuid.uuid4().hex
        first = await ide.turn(run_request("say hello", model=MODEL, conversation_id=conversation, workspace=str(workspace)))
        assert first.terminal is None and first.text == "Hello there."
        second = await ide.turn(run_request("read notes, run echo", model=MODEL, conversation_id=conversation, workspace=str(workspace)))
        assert second.terminal is None and "Read it and ran it." in second.text
        assert {e.WhichOneof("message") for e in ide.exec_log} >= {"read_args", "shell_stream_args"}
    finally:
        await ide.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


async def test_a_captured_session_replays_with_no_divergence(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    with ServerProcess(config(tmp_path, provider)) as server:
        script(provider, workspace)
        async with capturing(server) as captured:
            await session(server.base_url, workspace)
        files = captured.files
        # one file per stream: the two RunSSE streams with their appends
        streams = [f for f in files if json.loads(f.read_text())["kind"] == "agent-sse"]
        assert len(streams) == 2, files
        doc = json.loads(streams[1].read_text())
        frames = [fr for ex in doc["exchanges"] for fr in ex["frames"]]
        kinds = {(fr["dir"], fr.get("kind")) for fr in frames}
        assert ("client", "run_request") in kinds and ("client", "exec_client_message.read_result") in kinds
        assert ("client", "exec_client_message.shell_stream") in kinds and ("client", "kv_client_message.set_blob_result") in kinds
        assert ("server", "exec_server_message.read_args") in kinds and ("server", "kv_server_message.set_blob_args") in kinds
        assert all("at_ms" in fr and "raw" in fr for fr in frames if "message" in fr)

        listed = server.run_to_exit("capture", "list")
        assert listed.returncode == 0 and str(len(files)) in listed.stdout, listed
        shown = server.run_to_exit("capture", "show", str(streams[0]))
        assert shown.returncode == 0 and "run_request" in shown.stdout and "text_delta" in shown.stdout, shown
        out = tmp_path / "export.tar.gz"
        exported = server.run_to_exit("capture", "export", "--output", str(out))
        assert exported.returncode == 0, exported
        with tarfile.open(out) as tar:
            assert len([m for m in tar.getmembers() if m.isfile()]) == len(files)

    # The same session again against a fresh server whose provider answers the same.
    with ServerProcess(config(tmp_path, provider, "again")) as again:
        script(provider, workspace)
        result = replay(streams, again.base_url)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "no divergence" in result.stdout


async def test_a_server_that_drops_a_frame_kind_is_caught(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    with ServerProcess(config(tmp_path, provider)) as server:
        script(provider, workspace)
        async with capturing(server) as captured:
            await session(server.base_url, workspace)
        streams = [f for f in captured.files if json.loads(f.read_text())["kind"] == "agent-sse"]
        script(provider, workspace)
        with DroppingProxy(server.base_url, drop="turn_ended") as middle:
            result = replay(streams, middle.base_url)
    assert result.returncode == 1, result.stdout
    assert middle.dropped == 2  # one turn_ended per turn
    # the diff names what the recording had and the changed server did not send, in each stream
    assert result.stdout.count("\n  -interaction_update.turn_ended {") == 2, result.stdout
    assert "divergence in 2 of 2 stream(s)" in result.stdout


async def test_capture_is_off_by_default_and_the_banner_says_when_it_is_on(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    cfg = config(tmp_path, provider)
    with ServerProcess(cfg) as server:
        assert "capture: ON" not in server.log()
        status = server.run_to_exit("capture", "status")
        assert status.returncode == 0 and "off" in status.stdout
        script(provider, workspace)
        await session(server.base_url, workspace)
        assert capture_files(server) == []
        assert httpx.get(server.base_url + "/ui/api/capture").json() == {"on": False}
        started = server.run_to_exit("capture", "start")
        assert started.returncode == 0 and "on" in started.stdout, started
        # what the dashboard shows on every page while capture is on
        status = httpx.get(server.base_url + "/ui/api/capture").json()
        assert status["on"] is True and status["with_content"] is False and status["directory"].startswith(str(cfg.data_dir))
    # Capture stays on across a restart (the flag file), and the start banner says so.
    with ServerProcess(cfg) as server:
        assert "capture: ON" in server.log()
        assert server.run_to_exit("capture", "stop").returncode == 0


async def test_run_streams_and_relayed_side_rpcs_are_captured(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    """The HTTP/2 `Run` stream is one file with both directions; a side RPC the server relays
    upstream is captured too (its body by length and hash only, when redacted)."""
    with ServerProcess(config(tmp_path, provider)) as server:
        provider.enqueue(OPENAI_CHAT.text(["over ", "h2"]))
        async with capturing(server) as captured:
            ide = ScriptedIDE(server.base_url, workspace, transport="run")
            try:
                log = await ide.turn(run_request("hello", model=MODEL, conversation_id=uuid.uuid4().hex))
                assert log.text == "over h2"
            finally:
                await ide.close()
            httpx.post(server.base_url + "/aiserver.v1.AiService/CheckSomething", content=b"\x0a\x03abc", headers={"content-type": "application/proto"})
        docs = {json.loads(f.read_text())["kind"]: json.loads(f.read_text()) for f in captured.files}
        assert set(docs) == {"agent-run", "rpc"}, captured.files
        run = [f for ex in docs["agent-run"]["exchanges"] for f in ex["frames"]]
        client = [f["kind"] for f in run if f["dir"] == "client"]
        assert client[0] == "run_request" and set(client[1:]) == {"kv_client_message.set_blob_result"}
        assert "interaction_update.text_delta" in [f.get("kind") for f in run if f["dir"] == "server"]
        assert run[-1]["dir"] == "server" and run[-1]["end_stream"] == {}
        rpc = docs["rpc"]["exchanges"][0]
        # (no upstream listens here: the relay fails, unread body and all, and that is what is kept)
        assert rpc["path"] == "/aiserver.v1.AiService/CheckSomething" and rpc["status"] >= 500
        assert set(rpc["frames"][0]) == {"dir", "at_ms", "bytes", "sha256"}  # redacted: no raw body
        provider.enqueue(OPENAI_CHAT.text(["over ", "h2"]))
        result = replay(captured.files, server.base_url)
        assert result.returncode == 0 and "1 stream(s) replayed, 1 skipped" in result.stdout, result.stdout
        assert "00002-rpc-2.json: skipped" in result.stdout


async def test_a_capture_with_content_keeps_bodies_and_replays_side_rpcs(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    """With content: the user's text is in the file, a side RPC's body too (so it replays)."""
    with ServerProcess(config(tmp_path, provider)) as server:
        provider.enqueue(OPENAI_CHAT.text(["plain ", "words"]))
        async with capturing(server, with_content=True) as captured:
            ide = ScriptedIDE(server.base_url, workspace)
            try:
                assert (await ide.turn(run_request("the user's own words", model=MODEL, conversation_id=uuid.uuid4().hex))).text == "plain words"
            finally:
                await ide.close()
            models = httpx.post(server.base_url + "/aiserver.v1.AiService/AvailableModels", content=b"", headers={"content-type": "application/proto"})
            assert models.status_code == 200
        docs = {json.loads(f.read_text())["kind"]: f for f in captured.files}
        assert set(docs) == {"agent-sse", "rpc"}
        assert "the user's own words" in docs["agent-sse"].read_text()
        provider.enqueue(OPENAI_CHAT.text(["plain ", "words"]))
        result = replay(list(docs.values()), server.base_url)
    assert result.returncode == 0 and "no divergence (2 stream(s) replayed, 0 skipped)" in result.stdout, result.stdout


async def test_a_session_through_the_interceptor_is_captured_and_replays(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    """The IDE's way in: HTTP/2 in TLS to a Cursor host through the intercepting proxy, which hands
    the stream to the server. The capture holds it as the server got it (the proxy's own secret
    header redacted), and it replays against the server directly (h2c)."""
    cfg = EdgeServerConfig(
        data_dir=tmp_path / "server",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=provider.url + "/v1")],
        extra_server={"blob_ack_timeout_seconds": 3.0},
        proxy_port=free_port(),
    )
    (workspace / "notes.txt").write_text("through the proxy\n")
    replies = [OPENAI_CHAT.tool_calls([CallSpec("c_read", "Read", [json.dumps({"path": "notes.txt"})])]), OPENAI_CHAT.text(["Read it."])]
    with ServerProcess(cfg) as server:
        provider.enqueue(*replies)
        async with capturing(server) as captured:
            ide = ScriptedIDE(server.base_url, workspace, transport="run-via-proxy", proxy=(cfg.proxy_port, cfg.data_dir / "ca" / "ca.crt"))
            try:
                log = await ide.turn(run_request("read notes.txt", model=MODEL, conversation_id=uuid.uuid4().hex, workspace=str(workspace)))
                assert log.text == "Read it." and [e.WhichOneof("message") for e in ide.exec_log] == ["read_args"]
            finally:
                await ide.close()
        [path] = captured.files
        doc = json.loads(path.read_text())
        assert doc["kind"] == "agent-run"
        headers = dict(doc["exchanges"][0]["request_headers"])
        assert headers["x-server-upstream-url"] == "https://api2.cursor.sh/agent.v1.AgentService/Run"  # the proxy handed it over
        assert headers["x-cursor-byok-proxy"] == "[redacted secret]"
        provider.enqueue(*replies)
        result = replay([path], server.base_url)
    assert result.returncode == 0 and "no divergence (1 stream(s) replayed, 0 skipped)" in result.stdout, result.stdout


async def test_a_grpc_web_session_is_captured_decoded(tmp_path: Path, provider: FakeProviderServer, workspace: Path) -> None:
    """gRPC-Web's requests are enveloped and its stream ends in a trailer frame: the capture still
    holds each append's message and the stream's end, as it does for Connect."""
    provider.enqueue(OPENAI_CHAT.text(["Hello ", "there."]))
    with ServerProcess(config(tmp_path, provider)) as server:
        async with capturing(server) as captured:
            ide = ScriptedIDE(server.base_url, workspace, grpc_web=True)
            try:
                log = await ide.turn(run_request("say hello", model=MODEL, conversation_id=uuid.uuid4().hex, workspace=str(workspace)))
            finally:
                await ide.close()
            assert log.terminal is None and log.text == "Hello there."
            refused = httpx.post(server.base_url + BIDI_APPEND, content=envelope(b"\xff\xff"), headers={"content-type": GRPC_WEB_PROTO})
            assert refused.status_code == 200  # gRPC-Web: the error is in the trailer frame
        streams = [json.loads(f.read_text()) for f in captured.files if json.loads(f.read_text())["kind"] == "agent-sse"]
        [doc] = [d for d in streams if any(fr.get("kind") == "run_request" for ex in d["exchanges"] for fr in ex["frames"])]
        frames = [fr for ex in doc["exchanges"] for fr in ex["frames"]]
        answers = [fr for d in streams for ex in d["exchanges"] for fr in ex["frames"] if fr["dir"] == "server" and "status" in fr]
    assert {a.get("error", {}).get("code") for a in answers} == {None, "invalid_argument"}, answers  # the refusal's code kept
    assert ("client", "run_request") in {(fr["dir"], fr.get("kind")) for fr in frames}, frames
    server_frames = [fr for fr in frames if fr["dir"] == "server" and "status" not in fr]
    assert server_frames[-1].get("end_stream") == {}, server_frames[-1]  # ended normally
    assert all("message" in fr for fr in server_frames[:-1]), server_frames
