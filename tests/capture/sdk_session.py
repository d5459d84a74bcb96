"""The `@cursor/sdk` session in `tests/fixtures/captures/sdk-through-proxy/`: Cursor's own SDK
pointed at `https://api2.cursor.sh` through the intercepting proxy (`serve` with `[proxy]`, the
local CA), so it takes the IDE's way in (HTTP/2 `Run`), with capture on. A text turn, then a
second prompt with a Read round trip. Record it again when the SDK changes:

    .venv/bin/python -m tests.capture.sdk_session
"""
from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tests.clients.sdk.client import SdkDriver, find_node, install_sdk, stand_in_upstream
from tests.e2e.edge_support import EdgeServerConfig
from tests.fakes import FakeProviderServer
from tests.harness.capture import capturing
from tests.harness.server import ServerProcess, free_port

from .sessions import FIXTURES, MODEL, NOTES, enqueue, server_config

SDK_SESSION = "sdk-through-proxy"
BACKEND = "https://api2.cursor.sh"  # Cursor's own host: the SDK then speaks HTTP/2 `Run`
REPLIES: list[dict[str, Any]] = [
    {"text": ["Hello ", "from the SDK."]},
    {"tool_calls": [["c_read", "Read", {"path": "notes.txt"}]]},
    {"text": ["Read the notes."]},
]
STEPS = [{"prompt": "say hello"}, {"prompt": "read notes.txt"}]
# Node's http2 client takes no proxy (NODE_USE_ENV_PROXY covers http, https and fetch only):
# this preload tunnels it through HTTPS_PROXY, as a system proxy would.
H2_VIA_PROXY = Path(__file__).with_name("h2_via_proxy.cjs")


def proxied_env(proxy_port: int, ca_cert: Path) -> dict[str, str]:
    """The SDK's environment for the interceptor: Cursor's real backend host, the proxy, our CA."""
    return {
        "CURSOR_BACKEND_URL": BACKEND,
        "HTTPS_PROXY": f"http://127.0.0.1:{proxy_port}",
        "NODE_USE_ENV_PROXY": "1",
        "NODE_EXTRA_CA_CERTS": str(ca_cert),
        "NODE_OPTIONS": f"--require {H2_VIA_PROXY}",
    }


async def record(into: Path = FIXTURES) -> list[Path]:
    """Record the session into `into/sdk-through-proxy/`: its agent streams (the side RPCs went to
    the stand-in for Cursor's backend; redacted, they hold nothing to replay) and provider.json."""
    node, sdk = find_node(), install_sdk()
    with tempfile.TemporaryDirectory() as tmp, FakeProviderServer() as provider, stand_in_upstream() as upstream:
        root = Path(tmp)
        workspace, home = root / "workspace", root / "home"
        workspace.mkdir()
        home.mkdir()
        (workspace / "notes.txt").write_text(NOTES)
        base = server_config(root / "server", provider)
        cfg = EdgeServerConfig(**{**vars(base), "upstream": upstream.url}, proxy_port=free_port())
        with ServerProcess(cfg) as server:
            enqueue(provider, REPLIES)
            driver = SdkDriver(node=node, sdk=sdk, backend=BACKEND, home=home)
            driver.env.update(proxied_env(cfg.proxy_port, cfg.data_dir / "ca" / "ca.crt"))
            async with capturing(server) as captured:
                run = await asyncio.to_thread(driver.run, MODEL, workspace, STEPS)
            results = [run.result(step)["status"] for step in range(len(STEPS))]
            assert results == ["finished"] * len(STEPS), (results, run.errors(), run.stderr[-2000:])
        docs = {path: json.loads(path.read_text()) for path in captured.files}
        streams = [path for path, doc in docs.items() if doc["kind"].startswith("agent-")]
        for path in streams:
            headers = dict(docs[path]["exchanges"][0]["request_headers"])
            assert headers.get("x-server-upstream-url", "").startswith(BACKEND), (path.name, "not through the interceptor")
        target = into / SDK_SESSION
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for path in streams:
            shutil.copy(path, target / path.name)
        (target / "provider.json").write_text(json.dumps(REPLIES, indent=1) + "\n")
        return sorted(target.glob("0*.json"))


if __name__ == "__main__":
    print(SDK_SESSION, [p.name for p in asyncio.run(record())])
