"""The local attack surface, second part: the proxy is a door too, and connections, bodies and
certificates are resources. Each attack runs against the real server and proxy; the IDE's own turn
still passes beside it."""
from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import resource
import select
import socket
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import msgspec
import pytest

from tests.fakes import OPENAI_CHAT, FakeProviderServer, Reply
from tests.harness.ide import BIDI_APPEND, RUN_SSE, ScriptedIDE, run_request
from tests.harness.server import ServerProcess

from .edge_support import PROTO, EdgeServerConfig, LoopbackServer, edge_config, free_port, raw_http

MODEL = "byok-edge"
TOKEN = "attack-test-token-0123456789"
KEY = "sk-test-canary"  # the harness's model key
BASIC = "Basic " + base64.b64encode(f"cursor-byok:{TOKEN}".encode()).decode()
PASSTHROUGH = "/aiserver.v1.AiService/SomethingElse"


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        server.respond_with(lambda request: OPENAI_CHAT.text(["fine"]))
        yield server


class Recorder(LoopbackServer):
    """An upstream that records each connection's bytes until the peer ends it, and answers nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.connections: list[bytearray] = []
        self.ended = asyncio.Event()

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = bytearray()
        self.connections.append(data)
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                data += chunk
        writer.close()
        self.ended.set()


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeProviderServer]:
    """Cursor's backend: reads each request's whole body, then answers."""
    with FakeProviderServer() as server:
        server.respond_with(lambda request: Reply(body=b"upstream", content_type="application/proto"))
        yield server


def token_server(root: Path, provider: FakeProviderServer, upstream: FakeProviderServer, *, wrap: list[str] | None = None, **server: object) -> ServerProcess:
    """A server that requires the auth token, with the proxy beside it; `server`: more [server] keys."""
    cfg = edge_config(
        root, MODEL, provider, upstream, runsse_wait_seconds=1.0, proxy_port=free_port(), extra_server={"auth_token_env": "ATTACK_TEST_TOKEN", **server}
    )
    return ServerProcess(cfg, env={"ATTACK_TEST_TOKEN": TOKEN}, wrap=wrap)


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory, provider: FakeProviderServer, upstream: FakeProviderServer) -> Iterator[ServerProcess]:
    """Short connection deadlines, small body bounds."""
    with token_server(
        tmp_path_factory.mktemp("attack"),
        provider,
        upstream,
        first_byte_timeout_seconds=1.0,
        header_read_timeout_seconds=2.0,
        body_deadline_seconds=3.0,
        max_body_bytes=4 * 1024 * 1024,
        max_pending_body_bytes=6 * 1024 * 1024,
    ) as proc:
        yield proc


def proxy_port(server: ServerProcess) -> int:
    assert isinstance(server.config, EdgeServerConfig) and server.config.proxy_port is not None
    return server.config.proxy_port


def tunnel_ca(server: ServerProcess) -> Path:
    """The local CA the server's proxy signs Cursor's hosts with."""
    return server.config.data_dir / "ca" / "ca.crt"


def ide_through_proxy(server: ServerProcess, tmp_path: Path, credentials: str | None = f"cursor-byok:{TOKEN}") -> ScriptedIDE:
    """The IDE as Cursor runs it with `http.proxy` set: every request through the proxy, over TLS."""
    ca = tunnel_ca(server)
    ide = ScriptedIDE("https://api2.cursor.sh", tmp_path)
    auth = f"{credentials}@" if credentials else ""
    ide.client = httpx.AsyncClient(
        base_url="https://api2.cursor.sh",
        proxy=f"http://{auth}127.0.0.1:{proxy_port(server)}",
        verify=ssl.create_default_context(cafile=str(ca)),
        trust_env=False,
        timeout=30.0,
    )
    return ide


def direct_ide(server: ServerProcess, tmp_path: Path) -> ScriptedIDE:
    ide = ScriptedIDE(server.base_url, tmp_path)
    ide.client.headers["x-cursor-byok-token"] = TOKEN
    return ide


async def a_turn_passes(ide: ScriptedIDE) -> None:
    try:
        log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex), timeout=60.0)
    finally:
        await ide.close()
    assert log.text == "fine" and log.terminal is None


# -- 1. the proxy authenticates its clients whenever the server does ----------------------------------


@pytest.mark.parametrize("path", ["/ui/api/conversations", "/metrics", PASSTHROUGH])
async def test_the_proxy_forwards_nothing_without_the_token(proxied: ServerProcess, path: str) -> None:
    port = proxy_port(proxied)
    for credentials in ("", "Proxy-Authorization: Basic " + base64.b64encode(b"cursor-byok:wrong-token-0123456789").decode() + "\r\n"):
        head = f"GET http://api2.cursor.sh{path} HTTP/1.1\r\nHost: api2.cursor.sh\r\n{credentials}\r\n"
        resp = await asyncio.to_thread(raw_http, port, head.encode())
        assert resp.status == 407 and "proxy-authenticate: basic" in resp.head.lower(), resp.head
        connect = f"CONNECT api2.cursor.sh:443 HTTP/1.1\r\nHost: api2.cursor.sh:443\r\n{credentials}\r\n"
        resp = await asyncio.to_thread(raw_http, port, connect.encode())
        assert resp.status == 407, resp.head
    head = f"GET http://api2.cursor.sh/metrics HTTP/1.1\r\nHost: api2.cursor.sh\r\nProxy-Authorization: {BASIC}\r\n\r\n"
    resp = await asyncio.to_thread(raw_http, port, head.encode())
    assert resp.status == 200


async def test_the_proxy_over_tls_without_credentials_is_refused(proxied: ServerProcess, tmp_path: Path) -> None:
    ide = ide_through_proxy(proxied, tmp_path, credentials=None)
    with pytest.raises(httpx.ProxyError, match="407"):
        await ide.client.get("/ui/api/conversations")
    await ide.close()


async def test_a_turn_through_the_proxy_with_its_credentials(proxied: ServerProcess, tmp_path: Path) -> None:
    await a_turn_passes(ide_through_proxy(proxied, tmp_path))


async def test_the_proxy_is_no_relay_to_other_loopback_ports(proxied: ServerProcess) -> None:
    async with Recorder() as local:
        target = local.url.removeprefix("http://")
        port = proxy_port(proxied)
        for head in (
            f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: {BASIC}\r\n\r\n",
            f"GET http://{target}/x HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: {BASIC}\r\n\r\n",
            f"GET http://localhost:{target.rpartition(':')[2]}/x HTTP/1.1\r\nHost: localhost\r\nProxy-Authorization: {BASIC}\r\n\r\n",
        ):
            resp = await asyncio.to_thread(raw_http, port, head.encode())
            assert resp.status == 403, (head, resp.head)
        assert local.connections == []


# -- 2. connections are a bounded resource -------------------------------------------------------------


def closed_by_peer(port: int, first: bytes = b"", timeout: float = 30.0) -> bool:
    """Connect, send `first`, and wait for the other side to end the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        if first:
            sock.sendall(first)
        try:
            while sock.recv(65536):
                pass
        except ConnectionResetError:
            pass
        except TimeoutError:
            return False
        return True


@pytest.mark.parametrize("first", [b"", b"GET /__byok-api__/healthz HTTP/1.1\r\n"], ids=["no-byte", "half-a-head"])
async def test_a_connection_that_sends_no_request_is_closed(proxied: ServerProcess, first: bytes) -> None:
    for port in (proxied.port, proxy_port(proxied)):
        assert await asyncio.to_thread(closed_by_peer, port, first), port


CURSOR_HOST = "api2.cursor.sh"


def open_client(port: int, ca: Path | None = None, timeout: float = 30.0) -> socket.socket:
    """A connection to `port`; with `ca`, a TLS tunnel to Cursor's host through the proxy there
    (HTTP/1.1 inside, as Cursor with HTTP/2 off)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if ca is None:
        return sock
    sock.sendall(f"CONNECT {CURSOR_HOST}:443 HTTP/1.1\r\nHost: {CURSOR_HOST}:443\r\nProxy-Authorization: {BASIC}\r\n\r\n".encode())
    assert b" 200 " in sock.recv(4096)
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["http/1.1"])
    return context.wrap_socket(sock, server_hostname=CURSOR_HOST)


def trickle(sock: socket.socket, head: bytes, limit: int) -> int:
    """Send `head`, then a body byte every 0.2 s (the attacker's pace) until the peer answers or
    ends the connection; the body bytes sent by then."""
    with sock:
        sock.settimeout(0.2)
        sock.sendall(head)
        for sent in range(limit):
            try:
                sock.send(b"x")
                sock.recv(65536)  # an answer (408) or the end: either way the upload is over
                return sent
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError):
                return sent
        return limit


async def test_a_trickled_body_meets_an_overall_deadline(proxied: ServerProcess) -> None:
    """body_deadline_seconds = 3, a byte every 0.2 s of a 1,000-byte body: cut well before its end."""
    server_head = (
        f"POST {PASSTHROUGH} HTTP/1.1\r\nHost: 127.0.0.1:{proxied.port}\r\nx-cursor-byok-token: {TOKEN}\r\n"
        "content-type: application/proto\r\ncontent-length: 1000\r\n\r\n"
    )
    for sock, head in ((open_client(proxied.port), server_head), (open_client(proxy_port(proxied), tunnel_ca(proxied)), TRICKLED)):
        sent = await asyncio.to_thread(trickle, sock, head.encode(), 1000)
        assert sent < 100, (sock, sent)


TRICKLED = f"POST {PASSTHROUGH} HTTP/1.1\r\nHost: {CURSOR_HOST}\r\ncontent-type: application/proto\r\ncontent-length: 1000\r\n\r\n"


@pytest.fixture(scope="module")
def desktop_limits(tmp_path_factory: pytest.TempPathFactory, provider: FakeProviderServer) -> Iterator[ServerProcess]:
    """A server and proxy under a desktop's open-file limit (1,024, soft and hard)."""
    cfg = edge_config(tmp_path_factory.mktemp("lockout"), MODEL, provider, runsse_wait_seconds=1.0, proxy_port=free_port())
    with ServerProcess(cfg, wrap=DESKTOP_LIMITS) as proc:
        yield proc


DESKTOP_LIMITS = ["prlimit", "--nofile=1024:1024", "--"]
FLOOD = 1030


@contextlib.contextmanager
def idle_flood(port: int, count: int = FLOOD) -> Iterator[list[socket.socket]]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 1024), hard))
    socks: list[socket.socket] = []
    try:
        poller = select.poll()
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                sock.connect(("127.0.0.1", port))
            socks.append(sock)
            poller.register(sock, select.POLLOUT)
        # Every connection established (by the kernel: accepted by the server or queued for it),
        # or 20 s gone: the ones the listen queue turned away keep retrying their SYN meanwhile.
        waiting = len(socks)
        deadline = time.monotonic() + 20.0
        while waiting and time.monotonic() < deadline:
            for fd, _ in poller.poll(1000):
                poller.unregister(fd)
                waiting -= 1
        yield socks
    finally:
        for sock in socks:
            sock.close()


@pytest.mark.parametrize("target", ["server", "proxy"])
async def test_idle_connections_do_not_lock_the_ide_out(desktop_limits: ServerProcess, tmp_path: Path, target: str) -> None:
    port = desktop_limits.port if target == "server" else proxy_port(desktop_limits)
    with idle_flood(port):
        async with httpx.AsyncClient(timeout=60.0) as client:
            assert (await client.get(desktop_limits.base_url + "/__byok-api__/healthz")).status_code == 204
        ca = tunnel_ca(desktop_limits)
        ide = ScriptedIDE(desktop_limits.base_url, tmp_path, transport="run-via-proxy", proxy=(proxy_port(desktop_limits), ca)) if target == "proxy" else ScriptedIDE(desktop_limits.base_url, tmp_path)
        await a_turn_passes(ide)
    log = desktop_limits.log()
    assert log.count("Traceback") == 0
    assert len(log.splitlines()) < 200, log[-3000:]


# -- 3. bodies -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "content_type"), [(BIDI_APPEND, "application/proto"), (RUN_SSE, "application/connect+proto")])
async def test_a_body_over_the_limit_is_refused_from_its_declared_length(proxied: ServerProcess, path: str, content_type: str) -> None:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{proxied.port}\r\nx-cursor-byok-token: {TOKEN}\r\n"
        f"content-type: {content_type}\r\ncontent-length: {5 * 1024 * 1024}\r\n\r\n"
    )
    resp = await asyncio.to_thread(raw_http, proxied.port, head.encode(), timeout=2.0)  # no body byte is sent
    # RunSSE's refusals are 200 streams, but not this one: its body is never read, so its connection closes.
    assert resp.status == 413 and b"resource_exhausted" in resp.body and resp.closed, resp.head


def stalled_upload(port: int, size: int, sent: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30.0)
    sock.sendall(
        f"POST {BIDI_APPEND} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nx-cursor-byok-token: {TOKEN}\r\n"
        f"content-type: application/proto\r\ncontent-length: {size}\r\n\r\n".encode()
        + b"\x00" * sent
    )
    return sock


def _first_answer(socks: list[socket.socket], timeout: float) -> bytes:
    """The first answer any of the sockets gets (b"" if none within `timeout`)."""
    readable, _, _ = select.select(socks, [], [], timeout)
    return readable[0].recv(65536) if readable else b""


async def test_pending_bodies_are_bounded_in_total(proxied: ServerProcess, tmp_path: Path) -> None:
    """max_pending_body_bytes = 6 MiB: a third stalled 3 MiB body evicts the oldest one the server
    holds (which of the three that is depends on the order the server took them in, under load not
    always the order they were sent), long before any body's read timeout."""
    mib = 1024 * 1024
    socks = []
    try:
        for _ in range(3):
            socks.append(await asyncio.to_thread(stalled_upload, proxied.port, 4 * mib, 3 * mib))
        timeout = proxied.settings().server.body_read_timeout_seconds / 2
        answer = await asyncio.to_thread(_first_answer, socks, timeout)
        assert b" 429 " in answer.split(b"\r\n", 1)[0] and b"resource_exhausted" in answer, answer[:300]
        await a_turn_passes(direct_ide(proxied, tmp_path))
    finally:
        for sock in socks:
            sock.close()


# -- 4. leaf certificates ------------------------------------------------------------------------------


def handshakes(port: int, names: list[str], ca: Path) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    for name in names:
        with socket.create_connection(("127.0.0.1", port), timeout=30.0) as sock:
            sock.sendall(f"CONNECT {name}:443 HTTP/1.1\r\nHost: {name}:443\r\nProxy-Authorization: {BASIC}\r\n\r\n".encode())
            assert b" 200 " in sock.recv(4096)
            with context.wrap_socket(sock, server_hostname=name):
                pass


def proxy_stats(port: int) -> dict:
    head = f"GET /__byok-proxy__/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nProxy-Authorization: {BASIC}\r\n\r\n"
    resp = raw_http(port, head.encode())
    assert resp.status == 200, resp.head
    return msgspec.json.decode(resp.body)


async def test_the_leaf_certificate_cache_is_bounded(proxied: ServerProcess) -> None:
    """Every name under cursor.sh gets a certificate (~21 kB with its TLS context): 1,000 random
    names keep at most the 256 most recently used. (RSS is measured in benchmarks/results.)"""
    ca = tunnel_ca(proxied)
    port = proxy_port(proxied)
    await asyncio.to_thread(handshakes, port, [f"{uuid.uuid4().hex}.cursor.sh" for _ in range(1000)], ca)
    assert (await asyncio.to_thread(proxy_stats, port))["cached_leaves"] == 256


# -- 5. an aborted upload aborts the upstream request ----------------------------------------------------


@pytest.fixture
async def recorded_server(tmp_path: Path, provider: FakeProviderServer) -> AsyncIterator[tuple[ServerProcess, Recorder]]:
    async with Recorder() as upstream:
        cfg = edge_config(tmp_path, MODEL, provider, proxy_port=free_port())
        cfg.upstream = upstream.url
        proc = ServerProcess(cfg)
        await asyncio.to_thread(proc.start)
        try:
            yield proc, upstream
        finally:
            await asyncio.to_thread(proc.stop)


def upload_and_vanish(port: int, head: bytes, body: bytes, ca: Path | None = None) -> None:
    with open_client(port, ca) as sock:
        sock.sendall(head + body)


CHUNKED = "content-type: application/proto\r\ntransfer-encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("body", [b"10\r\n0123456", b"5\r\nhello\r\nFFFFFFFFFFFFFFFFFF\r\nabc"], ids=["cut-mid-chunk", "huge-chunk-size"])
@pytest.mark.parametrize("via", ["server", "proxy"])
async def test_an_aborted_upload_never_reaches_upstream_complete(recorded_server: tuple[ServerProcess, Recorder], body: bytes, via: str) -> None:
    server, upstream = recorded_server
    if via == "server":
        head = f"POST {PASSTHROUGH} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{CHUNKED}"
        await asyncio.to_thread(upload_and_vanish, server.port, head.encode(), body)
    else:
        head = f"POST {PASSTHROUGH} HTTP/1.1\r\nHost: {CURSOR_HOST}\r\n{CHUNKED}"
        await asyncio.to_thread(upload_and_vanish, proxy_port(server), head.encode(), body, tunnel_ca(server))
    # The upstream may never be reached at all (a refusal): wait for its end only once it was.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(upstream.ended.wait(), 10.0)
    for seen in upstream.connections:
        assert not bytes(seen).endswith(b"0\r\n\r\n"), bytes(seen)[-200:]


# -- 6. secrets in a readable config ---------------------------------------------------------------------


async def test_an_inline_token_in_a_readable_config_is_refused(tmp_path: Path) -> None:
    cfg = EdgeServerConfig(data_dir=tmp_path / "data", extra_server={"auth_token": TOKEN})
    server = ServerProcess(cfg)
    # Written as an editor writes it, readable by others: a CLI test run in this process before may
    # have left the server's umask 077 behind, which would write it private.
    shared_umask = os.umask(0o022)
    try:
        with pytest.raises(RuntimeError, match="permissions must be 0600"):
            await asyncio.to_thread(server.start)
    finally:
        os.umask(shared_umask)
    server.config_path.chmod(0o600)
    ok = ServerProcess(cfg)
    ok.config_path.parent.mkdir(parents=True, exist_ok=True)
    with ok:  # the same file, now private
        async with httpx.AsyncClient() as client:
            resp = await client.get(ok.base_url + "/metrics", headers={"x-cursor-byok-token": TOKEN})
        assert resp.status_code == 200


# -- 7. a key echoed in a provider's request id -----------------------------------------------------------


async def test_a_key_in_a_providers_request_id_is_never_stored_or_shown(tmp_path: Path) -> None:
    with FakeProviderServer() as leaky:
        body = msgspec.json.encode({"error": {"message": "bad key", "code": "invalid_api_key"}})
        leaky.enqueue(Reply(status=401, body=body, content_type="application/json", headers={"x-request-id": f"req-{KEY}"}))
        cfg = edge_config(tmp_path, MODEL, leaky)
        with ServerProcess(cfg) as server:
            ide = ScriptedIDE(server.base_url, tmp_path)
            conversation = uuid.uuid4().hex
            try:
                log = await ide.turn(run_request("hi", model=MODEL, conversation_id=conversation))
                shown = await ide.client.get(f"/ui/api/conversations/{conversation}")
            finally:
                await ide.close()
            assert log.terminal is not None and log.terminal.code == "unauthenticated"
            assert shown.status_code == 200 and KEY not in shown.text
            assert "req-" in server.log() and KEY not in server.log()
        stored = b"".join(p.read_bytes() for p in cfg.data_dir.glob("state.db*"))
        assert KEY.encode() not in stored


# -- 8. the token prefix, and passthrough GETs ------------------------------------------------------------


async def test_a_percent_encoded_token_prefix_routes_and_a_wrong_one_is_not_echoed(proxied: ServerProcess) -> None:
    encoded = "".join(f"%{b:02X}" for b in TOKEN[:4].encode()) + TOKEN[4:]
    async with httpx.AsyncClient(base_url=proxied.base_url, headers=PROTO) as client:
        resp = await client.post(f"/_token/{encoded}/agent.v1.AgentService/GetUsableModels", content=b"")
        assert resp.status_code == 200 and MODEL.encode() in resp.content, resp.text
        wrong = "wrong-token-tail-secret-part"
        resp = await client.post(f"/_token/{wrong}/agent.v1.AgentService/GetUsableModels", content=b"")
        assert resp.status_code in (400, 401) and wrong not in resp.text and "secret-part" not in resp.text


async def test_a_passthrough_get_gains_no_body_headers(tmp_path: Path, provider: FakeProviderServer) -> None:
    with FakeProviderServer() as upstream:
        upstream.respond_with(lambda request: Reply(body=b"ok", content_type="application/json"))
        cfg = edge_config(tmp_path, MODEL, provider, upstream, proxy_port=free_port())
        with ServerProcess(cfg) as server:
            async with httpx.AsyncClient() as client:
                assert (await client.get(server.base_url + "/some/page")).status_code == 200
            ca = tunnel_ca(server)
            async with httpx.AsyncClient(proxy=f"http://127.0.0.1:{cfg.proxy_port}", verify=ssl.create_default_context(cafile=str(ca)), trust_env=False) as client:
                assert (await client.get("https://api2.cursor.sh/some/page")).status_code == 200
        for request in upstream.requests:
            assert "transfer-encoding" not in request.headers and "content-type" not in request.headers, request.headers


def test_open_file_limit_is_raised_to_the_hard_limit(tmp_path: Path, provider: FakeProviderServer) -> None:
    cfg = edge_config(tmp_path, MODEL, provider)
    with ServerProcess(cfg, wrap=["prlimit", "--nofile=1024:4096", "--"]) as server:
        assert server.proc is not None
        limits = Path(f"/proc/{server.proc.pid}/limits").read_text()
        [line] = [line for line in limits.splitlines() if line.startswith("Max open files")]
        assert line.split()[3:5] == ["4096", "4096"], line


# -- soak: every attack at the assessment's size, each beside the IDE's turns ------------------------------


def unauthenticated_requests(port: int, count: int = 2000) -> None:
    for _ in range(count):
        resp = raw_http(port, b"GET http://api2.cursor.sh/ui/api/conversations HTTP/1.1\r\nHost: api2.cursor.sh\r\n\r\n")
        assert resp.status == 407


def held_idle_flood(server: ServerProcess, done: asyncio.Event, loop: asyncio.AbstractEventLoop) -> None:
    with idle_flood(server.port), idle_flood(proxy_port(server)):
        asyncio.run_coroutine_threadsafe(done.wait(), loop).result()


def trickles(server: ServerProcess) -> None:
    for _ in range(5):
        assert trickle(open_client(proxy_port(server), tunnel_ca(server)), TRICKLED.encode(), 1000) < 100


def body_flood(server: ServerProcess) -> None:
    mib = 1024 * 1024
    socks = []
    try:
        for _ in range(25):
            with contextlib.suppress(OSError):  # a dropped body's connection is closed under the sender
                socks.append(stalled_upload(server.port, 6 * mib, 5 * mib))
    finally:
        for sock in socks:
            sock.close()


def aborted_uploads(server: ServerProcess, count: int = 200) -> None:
    head = f"POST {PASSTHROUGH} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nx-cursor-byok-token: {TOKEN}\r\n{CHUNKED}"
    for _ in range(count):
        upload_and_vanish(server.port, head.encode(), b"10\r\n0123456")


@pytest.mark.soak
@pytest.mark.parametrize("attack", ["unauthenticated", "idle-flood", "trickle", "bodies", "certificates", "aborted-uploads"])
async def test_attacks_beside_the_ides_turns(desktop_limits_with_token: ServerProcess, tmp_path: Path, attack: str) -> None:
    server = desktop_limits_with_token
    done = asyncio.Event()  # the idle flood is held until the turns beside it are through
    ca = tunnel_ca(server)
    loop = asyncio.get_running_loop()
    work = {
        "unauthenticated": lambda: unauthenticated_requests(proxy_port(server)),
        "idle-flood": lambda: held_idle_flood(server, done, loop),
        "trickle": lambda: trickles(server),
        "bodies": lambda: body_flood(server),
        "certificates": lambda: handshakes(proxy_port(server), [f"{uuid.uuid4().hex}.cursor.sh" for _ in range(2000)], ca),
        "aborted-uploads": lambda: aborted_uploads(server),
    }[attack]
    attacking = asyncio.ensure_future(asyncio.to_thread(work))
    turns = 0
    while not attacking.done() or turns < 2:
        await a_turn_passes(direct_ide(server, tmp_path))
        await a_turn_passes(ide_through_proxy(server, tmp_path))
        turns += 2
        if attack == "idle-flood" and turns >= 6:
            done.set()
    await attacking
    assert "Traceback" not in server.log()


@pytest.fixture(scope="module")
def desktop_limits_with_token(tmp_path_factory: pytest.TempPathFactory, provider: FakeProviderServer, upstream: FakeProviderServer) -> Iterator[ServerProcess]:
    """The default limits but a short body deadline, under a desktop's open-file limit."""
    with token_server(tmp_path_factory.mktemp("soak"), provider, upstream, wrap=DESKTOP_LIMITS, body_deadline_seconds=3.0) as proc:
        yield proc
