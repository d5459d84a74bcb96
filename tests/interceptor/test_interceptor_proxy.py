"""The intercepting proxy, end to end over real sockets on 127.0.0.1."""
from __future__ import annotations

import asyncio
import hashlib
import ssl
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from interceptor_support import MODELS_BYTES, MODELS_PATH, client_context, self_signed

from cursor_byok.interceptor import CA_COMMON_NAME, InterceptingProxy, LocalCA, ProxyLimits


def via_proxy(proxy: InterceptingProxy, ca: LocalCA, **kw) -> httpx.AsyncClient:
    return httpx.AsyncClient(proxy=proxy.url, verify=client_context(ca.paths.cert), trust_env=False, **kw)


def peer_cert(response: httpx.Response) -> x509.Certificate:
    ssl_object = response.extensions["network_stream"].get_extra_info("ssl_object")
    return x509.load_der_x509_certificate(ssl_object.getpeercert(binary_form=True))


async def test_cursor_host_is_terminated_and_sent_to_the_gateway(proxy, ca, gateway):
    async with via_proxy(proxy, ca) as client:
        response = await client.post(
            f"https://api2.cursor.sh{MODELS_PATH}?probe=1",
            content=b"\x00\x01",
            headers={"authorization": "Bearer user-token", "x-cursor-client-version": "1.2.3", "content-type": "application/proto"},
        )
        cert = peer_cert(response)
        alpn = response.extensions["network_stream"].get_extra_info("ssl_object").selected_alpn_protocol()
    assert response.status_code == 200
    assert response.content == MODELS_BYTES
    assert response.headers["content-type"] == "application/proto"
    # The client validated a leaf for api2.cursor.sh issued by our CA (it trusts nothing else).
    assert cert.issuer.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == CA_COMMON_NAME
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["api2.cursor.sh"]
    assert alpn in (None, "http/1.1")
    [seen] = gateway.seen
    assert (seen.method, seen.path, seen.query) == ("POST", MODELS_PATH, b"probe=1")
    assert seen.header("x-server-upstream-url") == f"https://api2.cursor.sh{MODELS_PATH}?probe=1"
    assert seen.header("authorization") == "Bearer user-token"
    assert seen.header("x-cursor-client-version") == "1.2.3"
    assert seen.header("host") == "api2.cursor.sh"
    assert seen.body == b"\x00\x01"
    assert proxy.stats.intercepted_tunnels == 1 and proxy.stats.raw_tunnels == 0


async def test_any_cursor_subdomain_is_intercepted_and_ports_are_kept(proxy, ca, gateway):
    async with via_proxy(proxy, ca) as client:
        r1 = await client.get("https://repo42.cursor.sh/x/y")
        r2 = await client.get("https://api3.cursor.sh:8443/z")
    assert (r1.status_code, r2.status_code) == (404, 404)
    urls = [s.header("x-server-upstream-url") for s in gateway.seen]
    assert urls == ["https://repo42.cursor.sh/x/y", "https://api3.cursor.sh:8443/z"]


async def test_client_supplied_upstream_header_is_replaced(proxy, ca, gateway):
    async with via_proxy(proxy, ca) as client:
        await client.get("https://api2.cursor.sh/a", headers={"x-server-upstream-url": "https://evil.example/"})
    [seen] = gateway.seen
    assert [v for k, v in seen.headers if k == "x-server-upstream-url"] == ["https://api2.cursor.sh/a"]


async def test_keep_alive_serves_several_requests_per_tunnel(proxy, ca, gateway):
    async with via_proxy(proxy, ca) as client:
        for i in range(3):
            response = await client.get(f"https://api2.cursor.sh{MODELS_PATH}?n={i}")
            assert response.content == MODELS_BYTES
    assert proxy.stats.intercepted_tunnels == 1
    assert proxy.stats.gateway_requests == 3
    assert [s.query for s in gateway.seen] == [b"n=0", b"n=1", b"n=2"]


async def test_request_bodies_pass_through_with_both_framings(proxy, ca, gateway):
    payload = bytes(range(256)) * 1024  # 256 KiB, binary

    async def chunks():
        for i in range(0, len(payload), 10_000):
            yield payload[i : i + 10_000]

    async with via_proxy(proxy, ca) as client:
        fixed = await client.post("https://api2.cursor.sh/echo", content=payload)
        streamed = await client.post("https://api2.cursor.sh/echo", content=chunks())
    assert fixed.status_code == streamed.status_code == 201
    assert hashlib.sha256(fixed.content).digest() == hashlib.sha256(payload).digest()
    assert streamed.content == payload
    assert [len(s.body) for s in gateway.seen] == [len(payload), len(payload)]


async def test_streamed_response_arrives_before_the_upstream_finishes(proxy, ca, gateway):
    async with via_proxy(proxy, ca) as client:
        async with client.stream("POST", "https://api2.cursor.sh/stream", content=b"\x00") as response:
            assert response.status_code == 200
            assert response.headers.get("transfer-encoding") == "chunked"
            chunks = response.aiter_raw()
            first = await asyncio.wait_for(chunks.__anext__(), 5)
            # The stand-in has not sent (cannot send) its last chunk yet: it waits for this event.
            assert not gateway.last_chunk_sent.is_set()
            gateway.release.set()
            rest = b"".join([c async for c in chunks])
    assert first == b"first-chunk"
    assert rest == b"last-chunk"
    assert gateway.last_chunk_sent.is_set()


async def test_client_hang_up_closes_the_gateway_stream(proxy, ca, gateway):
    async with via_proxy(proxy, ca) as client:
        async with client.stream("GET", "https://api2.cursor.sh/hold") as response:
            assert await asyncio.wait_for(response.aiter_raw().__anext__(), 5) == b"hello"
    # The client closed its connection while the upstream was silent; the proxy noticed.
    await asyncio.wait_for(gateway.disconnected.wait(), 10)


async def test_other_hosts_are_tunnelled_without_tls_termination(proxy, ca, gateway, tmp_path: Path):
    standin = self_signed("localhost-standin", ips=("127.0.0.1",))
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nstand-in")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=standin.server_context(tmp_path))
    port = server.sockets[0].getsockname()[1]
    (tmp_path / "standin-ca.pem").write_bytes(standin.cert_pem)
    try:
        # The client trusts ONLY the stand-in's own certificate: it would reject one from our CA.
        async with httpx.AsyncClient(
            proxy=proxy.url, verify=client_context(tmp_path / "standin-ca.pem"), trust_env=False
        ) as client:
            response = await client.get(f"https://127.0.0.1:{port}/hello")
            der = response.extensions["network_stream"].get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        server.close()
        await server.wait_closed()
    assert response.text == "stand-in"
    assert der == standin.cert_der
    assert seen and seen[0].startswith(b"GET /hello HTTP/1.1\r\n")
    assert proxy.stats.raw_tunnels == 1 and proxy.stats.intercepted_tunnels == 0
    assert gateway.seen == []


async def test_raw_tunnel_bytes_are_untouched_both_ways(proxy, gateway):
    received = bytearray()

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            received.extend(data)
            writer.write(data[::-1])
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    payload = b"\x16\x03\x01\x02\x00GET / HTTP/1.1\r\n\r\n\x00\xff" + bytes(range(256))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        status = await reader.readuntil(b"\r\n\r\n")
        writer.write(payload)
        back = await asyncio.wait_for(reader.readexactly(len(payload)), 5)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert status.startswith(b"HTTP/1.1 200")
    assert bytes(received) == payload
    assert back == payload[::-1]
    assert gateway.seen == []


async def test_plain_http_to_other_hosts_is_forwarded_as_is(proxy, gateway):
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Origin: yes\r\n\r\nplain")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(proxy=proxy.url, trust_env=False) as client:
            response = await client.get(f"http://127.0.0.1:{port}/p?q=1", headers={"x-mine": "1"})
    finally:
        server.close()
        await server.wait_closed()
    assert (response.status_code, response.text, response.headers["x-origin"]) == (200, "plain", "yes")
    head = seen[0].decode()
    assert head.startswith("GET /p?q=1 HTTP/1.1\r\n")
    assert "x-mine: 1" in head and "x-server-upstream-url" not in head
    assert gateway.seen == []


async def test_plain_http_to_a_cursor_host_goes_to_the_gateway(proxy, gateway):
    async with httpx.AsyncClient(proxy=proxy.url, trust_env=False) as client:
        response = await client.get(f"http://api2.cursor.sh{MODELS_PATH}")
    assert response.content == MODELS_BYTES
    [seen] = gateway.seen
    assert seen.header("x-server-upstream-url") == f"http://api2.cursor.sh{MODELS_PATH}"


async def test_websocket_upgrades_on_cursor_hosts_go_to_the_real_host(ca, gateway, tmp_path: Path):
    upstream_cert = self_signed("api2.cursor.sh")
    (tmp_path / "upstream.pem").write_bytes(upstream_cert.cert_pem)
    heads: list[bytes] = []

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        while data := await reader.read(65536):
            writer.write(data.upper())
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(upstream, "127.0.0.1", 0, ssl=upstream_cert.server_context(tmp_path))
    up_port = server.sockets[0].getsockname()[1]
    proxy = InterceptingProxy(
        ca,
        gateway.url,
        upstream_tls=client_context(tmp_path / "upstream.pem"),
        upstream_address=lambda host, port: ("127.0.0.1", up_port),
    )
    await proxy.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"CONNECT api2.cursor.sh:443 HTTP/1.1\r\nHost: api2.cursor.sh:443\r\n\r\n")
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        await writer.start_tls(client_context(ca.paths.cert), server_hostname="api2.cursor.sh")
        request = (
            b"GET /ws HTTP/1.1\r\nHost: api2.cursor.sh\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        writer.write(request)
        switched = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.write(b"frame-bytes")
        echoed = await asyncio.wait_for(reader.readexactly(len(b"frame-bytes")), 5)
        writer.close()
    finally:
        await proxy.stop()
        server.close()
        await server.wait_closed()
    assert switched.startswith(b"HTTP/1.1 101")
    assert heads == [request]
    assert echoed == b"FRAME-BYTES"
    assert gateway.seen == []


async def raw_exchange(port: int, data: bytes, *, timeout: float = 5) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        return await asyncio.wait_for(reader.read(65536), timeout)
    finally:
        writer.close()


async def test_oversized_request_head_is_refused(proxy):
    reply = await raw_exchange(proxy.port, b"GET http://x.invalid/ HTTP/1.1\r\nHost: x.invalid\r\nX-Big: " + b"a" * 40_000 + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 431")


@pytest.mark.parametrize(
    "request_bytes,status",
    [
        (b"NONSENSE\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"400"),  # origin-form: not a proxy request
        (b"GET http://x.invalid/ HTTP/2.0\r\n\r\n", b"505"),
        (b"CONNECT :443 HTTP/1.1\r\n\r\n", b"400"),
        (b"GET https://example.invalid/ HTTP/1.1\r\n\r\n", b"400"),
    ],
)
async def test_malformed_requests_get_a_clean_error(proxy, request_bytes, status):
    reply = await raw_exchange(proxy.port, request_bytes)
    assert reply.split(b" ")[1] == status


async def test_connect_to_a_closed_port_is_a_bad_gateway(proxy):
    from interceptor_support import free_port

    port = free_port()
    reply = await raw_exchange(proxy.port, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 502")


async def test_idle_connections_are_closed(ca, gateway):
    proxy = InterceptingProxy(ca, gateway.url, limits=ProxyLimits(first_byte_seconds=0.3))
    await proxy.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the proxy, nothing sent
        writer.close()
    finally:
        await proxy.stop()


async def test_gateway_down_is_a_bad_gateway_not_a_hang(ca):
    from interceptor_support import free_port

    proxy = InterceptingProxy(ca, f"http://127.0.0.1:{free_port()}")
    await proxy.start()
    try:
        async with via_proxy(proxy, ca) as client:
            response = await client.get("https://api2.cursor.sh/x")
    finally:
        await proxy.stop()
    assert response.status_code == 502
    assert "cursor-byok proxy" in response.text


async def test_health_endpoint_and_stop_releases_the_port(ca, gateway):
    proxy = InterceptingProxy(ca, gateway.url)
    await proxy.start()
    port = proxy.port
    async with httpx.AsyncClient(trust_env=False) as client:
        response = await client.get(f"http://127.0.0.1:{port}/__byok-proxy__/healthz")
    await proxy.stop()
    assert response.status_code == 204
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)


@pytest.mark.parametrize(("offered", "chosen"), [(["h2", "http/1.1"], "h2"), (["http/1.1"], "http/1.1")])
async def test_tls_handshake_speaks_http2_when_the_client_offers_it(proxy, ca, offered, chosen):
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"CONNECT api2.cursor.sh:443 HTTP/1.1\r\nHost: api2.cursor.sh:443\r\n\r\n")
    await reader.readuntil(b"\r\n\r\n")
    ctx = client_context(ca.paths.cert)
    ctx.set_alpn_protocols(offered)
    await writer.start_tls(ctx, server_hostname="api2.cursor.sh")
    ssl_object: ssl.SSLObject = writer.get_extra_info("ssl_object")
    assert ssl_object.selected_alpn_protocol() == chosen
    writer.close()


@pytest.mark.parametrize("target", [b"*", b"/caf\xc3\xa9", b"ftp://api2.cursor.sh/x"])
async def test_bad_targets_inside_a_tunnel_get_400(proxy, ca, gateway, target):
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"CONNECT api2.cursor.sh:443 HTTP/1.1\r\nHost: api2.cursor.sh:443\r\n\r\n")
    await reader.readuntil(b"\r\n\r\n")
    await writer.start_tls(client_context(ca.paths.cert), server_hostname="api2.cursor.sh")
    writer.write(b"GET " + target + b" HTTP/1.1\r\nHost: api2.cursor.sh\r\n\r\n")
    reply = await asyncio.wait_for(reader.read(65536), 5)
    writer.close()
    assert reply.startswith(b"HTTP/1.1 400")
    assert gateway.seen == []


async def test_a_corporate_proxy_carries_everything_not_intercepted(ca, gateway):
    """Chaining: tunnels the proxy does not open and plain-HTTP requests to other hosts go through
    the corporate proxy Cursor used before; *.cursor.sh stays with us."""
    import base64

    from interceptor_support import free_port

    from tests.fakes import FakeCorporateProxy

    async def reverse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data[::-1])
            await writer.drain()
        writer.close()

    remote = await asyncio.start_server(reverse, "127.0.0.1", 0)
    remote_port = remote.sockets[0].getsockname()[1]
    closed = free_port()
    route = {"example.test": ("127.0.0.1", remote_port), "gone.test": ("127.0.0.1", closed)}
    with FakeCorporateProxy(route=lambda host, port: route[host]) as corp:
        corp_port = corp.url.rpartition(":")[2]
        proxy = InterceptingProxy(ca, gateway.url, upstream_proxy=f"http://alice:s%3Acret@127.0.0.1:{corp_port}")
        await proxy.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n")
            status = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            writer.write(b"ping")
            back = await asyncio.wait_for(reader.readexactly(4), 5)
            writer.close()

            async with via_proxy(proxy, ca) as client:
                intercepted = await client.get(f"https://api2.cursor.sh{MODELS_PATH}")
            async with httpx.AsyncClient(proxy=proxy.url, trust_env=False) as client:
                plain = await client.get("http://example.test/page")

            refused = await raw_exchange(proxy.port, b"CONNECT gone.test:443 HTTP/1.1\r\nHost: gone.test:443\r\n\r\n")
        finally:
            await proxy.stop()
            remote.close()
            await remote.wait_closed()
    assert status.startswith(b"HTTP/1.1 200") and back == b"gnip"
    assert corp.connects == ["example.test:443", "gone.test:443"]  # never api2.cursor.sh
    assert corp.auth[0] == "Basic " + base64.b64encode(b"alice:s:cret").decode()
    assert intercepted.content == MODELS_BYTES and len(gateway.seen) == 1
    assert plain.text == "via corporate proxy"
    assert corp.requests[0].startswith(b"GET http://example.test/page HTTP/1.1\r\n")
    assert refused.startswith(b"HTTP/1.1 502") and f"the upstream proxy http://***@127.0.0.1:{corp_port} refused CONNECT gone.test:443".encode() in refused
    assert b"cret" not in refused
