"""The provider HTTP client on its own: what it sends through a proxy the environment names, and how
a failure below HTTP reaches the adapters."""
from __future__ import annotations

import asyncio
import gzip
import inspect
import ssl

import pytest
from aiohttp import client_proto
from aiohttp.base_protocol import BaseProtocol
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ClientRequest
from aiohttp.http import SERVER_SOFTWARE

from cursor_byok.http_client import HttpError, ProviderHttp, ProviderResponse
from cursor_byok.providers.errors import parse_retry_after
from tests.fakes import FakeCorporateProxy
from tests.harness.server import free_port
from tests.interceptor.interceptor_support import self_signed


@pytest.mark.filterwarnings("error::DeprecationWarning")  # nothing the next aiohttp drops
async def test_a_proxy_from_the_environment_carries_the_request_with_its_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeCorporateProxy(answer=b"via proxy") as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("http://", "http://me:s3cret@"))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with ProviderHttp() as client:
            headers = client.headers({"Authorization": "Bearer k", "Content-Type": "application/json"})
            response = await client.post("http://provider.invalid/v1/chat/completions", b"{}", headers, connect_timeout=5)
            assert response.status == 200
            assert await response.next_chunk() == b"via proxy"
            await response.aclose()
    assert proxy.auth == ["Basic bWU6czNjcmV0"]  # me:s3cret
    [head] = proxy.requests
    assert head.startswith(b"POST http://provider.invalid/v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nauthorization: Bearer k\r\n" in head and b"\r\ncontent-type: application/json\r\n" in head


async def test_a_refused_connection_is_an_http_error_naming_its_cause() -> None:
    async with ProviderHttp(trust_env=False) as client:
        with pytest.raises(HttpError) as refused:
            await client.post(f"http://127.0.0.1:{free_port()}/v1", b"{}", client.headers({}), connect_timeout=5)
    assert type(refused.value.__cause__).__name__ == "ConnectError"  # httpx's name, as the transport maps it
    assert "Cannot connect to host 127.0.0.1" in str(refused.value)


# ---- the request written on aiohttp's pooled connection, the answer read by its protocol ----------

_SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"


def _whole(body: bytes, extra: bytes = b"") -> bytes:
    return _SSE_HEAD + extra + b"content-length: %d\r\n\r\n%s" % (len(body), body)


class _Origin:
    """A provider on loopback, in the test's own loop: it answers the requests of every connection
    in turn with the scripted replies (bytes; None: hold the connection, sending nothing more; b"":
    close it without an answer),
    records each connection's requests (head and body), and sets `ended[i]` when connection i ends."""

    def __init__(self, *replies: bytes | None, tls: ssl.SSLContext | None = None, close_after_reply: bool = False) -> None:
        self.replies = list(replies)
        self.tls = tls
        self.close_after_reply = close_after_reply
        self.connections: list[list[bytes]] = []
        self.ended: list[asyncio.Event] = []
        self.closed_by_us: list[asyncio.Event] = []
        self._server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> _Origin:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests: list[bytes] = []
        ended, closed = asyncio.Event(), asyncio.Event()
        self.connections.append(requests)
        self.ended.append(ended)
        self.closed_by_us.append(closed)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = next((int(line[15:]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")), 0)
                requests.append(head + await reader.readexactly(length))
                reply = self.replies.pop(0)
                if reply is None:
                    await reader.read()  # held until the client goes
                    return
                if not reply:  # dropped as it arrived: the provider's idle close crossing the request
                    writer.close()
                    await writer.wait_closed()
                    return
                writer.write(reply)
                if self.close_after_reply:  # the provider's idle timeout, at once
                    writer.close()
                    await writer.wait_closed()
                    closed.set()
                    return
        finally:
            ended.set()


async def _read_all(response: ProviderResponse) -> bytes:
    body = b""
    while chunk := await response.next_chunk():
        body += chunk
    await response.aclose()
    return body


async def test_the_request_is_sent_as_aiohttps_request_sends_it_on_one_kept_alive_connection() -> None:
    async with _Origin(_whole(b"data: 1\n\n"), _whole(b"data: 2\n\n"), b"HTTP/1.1 204 No Content\r\n\r\n") as origin, ProviderHttp(trust_env=False) as client:
        headers = client.headers({"Authorization": "Bearer k", "Content-Type": "application/json", "accept": "text/event-stream"})
        for body, expected in ((b'{"a":1}', b"data: 1\n\n"), (b'{"a":10}', b"data: 2\n\n")):
            response = await client.post(origin.url + "/v1/chat/completions?beta=1", body, headers, connect_timeout=5)
            assert (response.status, response.headers["content-type"]) == (200, "text/event-stream")
            assert await _read_all(response) == expected
        assert await client.probe(origin.url + "/v1", connect_timeout=5) == 204
    host = origin.url.removeprefix("http://").encode()
    defaults = b"Accept-Encoding: %s\r\nUser-Agent: %s\r\n" % (ClientRequest.DEFAULT_HEADERS["Accept-Encoding"].encode(), SERVER_SOFTWARE.encode())
    post = (b"POST /v1/chat/completions?beta=1 HTTP/1.1\r\nHost: %s\r\nauthorization: Bearer k\r\ncontent-type: application/json\r\n"
            b"accept: text/event-stream\r\n%sContent-Length: %%d\r\n\r\n%%s") % (host, defaults)
    head = b"HEAD /v1 HTTP/1.1\r\nHost: %s\r\nAccept: */*\r\n%s\r\n" % (host, defaults)
    assert origin.connections == [[post % (7, b'{"a":1}'), post % (8, b'{"a":10}'), head]]


async def test_a_kept_connection_reads_its_next_answers_with_the_parser_it_has(monkeypatch: pytest.MonkeyPatch) -> None:
    # A parser per request is ~10 µs of a lone start's loop CPU: one per connection and kind of answer
    # (a probe's has no body), each answer of either kind still read whole, chunked or not.
    made: list[bool] = []

    class CountedParser(client_proto.HttpResponseParser):  # type: ignore[misc]
        def __init__(self, *args: object, response_with_body: bool = True, **kwargs: object) -> None:
            made.append(response_with_body)
            super().__init__(*args, response_with_body=response_with_body, **kwargs)

    monkeypatch.setattr(client_proto, "HttpResponseParser", CountedParser)
    chunked = _SSE_HEAD + b"transfer-encoding: chunked\r\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"
    no_content = b"HTTP/1.1 204 No Content\r\n\r\n"
    with_length = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"  # a HEAD answer: the length of a body it does not send
    async with _Origin(_whole(b"data: 1\n\n"), chunked, no_content, with_length, _whole(b"data: 3\n\n"), _whole(b"data: 4\n\n")) as origin, ProviderHttp(trust_env=False) as client:
        headers = client.headers({})
        assert await _read_all(await client.post(origin.url, b"{}", headers, connect_timeout=5)) == b"data: 1\n\n"
        assert await _read_all(await client.post(origin.url, b"{}", headers, connect_timeout=5)) == b"data: 2\n\n"
        assert await client.probe(origin.url, connect_timeout=5) == 204
        assert await client.probe(origin.url, connect_timeout=5) == 200
        assert await _read_all(await client.post(origin.url, b"{}", headers, connect_timeout=5)) == b"data: 3\n\n"
        assert await _read_all(await client.post(origin.url, b"{}", headers, connect_timeout=5)) == b"data: 4\n\n"
    assert [len(requests) for requests in origin.connections] == [6]
    assert made == [True, False, True]


async def test_a_connection_the_provider_closed_while_idle_is_replaced() -> None:
    async with _Origin(_whole(b"data: 1\n\n"), _whole(b"data: 2\n\n"), close_after_reply=True) as origin, ProviderHttp(trust_env=False) as client:
        headers = client.headers({})
        assert await _read_all(await client.post(origin.url, b"{}", headers, connect_timeout=5)) == b"data: 1\n\n"
        await origin.closed_by_us[0].wait()
        for _ in range(3):  # the provider's FIN is in the client's socket: its next loop poll sees it
            await asyncio.sleep(0)
        assert await _read_all(await client.post(origin.url, b"{}", headers, connect_timeout=5)) == b"data: 2\n\n"
    assert [len(requests) for requests in origin.connections] == [1, 1]


async def test_a_probe_the_provider_dropped_on_a_kept_connection_is_sent_once_more_on_a_new_one() -> None:
    # As aiohttp's session does for a request that may be repeated: the probe is what keeps the origin
    # warm, and a kept connection the provider closed as the probe went out on it says nothing of the
    # origin. A model request is not sent twice.
    no_content = b"HTTP/1.1 204 No Content\r\n\r\n"
    async with _Origin(no_content, b"", no_content, _whole(b"data: 1\n\n"), b"") as origin, ProviderHttp(trust_env=False) as client:
        assert await client.probe(origin.url + "/v1", connect_timeout=5) == 204
        assert await client.probe(origin.url + "/v1", connect_timeout=5) == 204
        assert await _read_all(await client.post(origin.url, b"{}", client.headers({}), connect_timeout=5)) == b"data: 1\n\n"
        with pytest.raises(HttpError):
            await client.post(origin.url, b"{}", client.headers({}), connect_timeout=5)
    assert [len(requests) for requests in origin.connections] == [2, 3]


async def test_a_body_cut_short_closes_its_connection_and_the_next_request_opens_another() -> None:
    chunked = _SSE_HEAD + b"transfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n"  # and then nothing
    async with _Origin(chunked, chunked, _whole(b"data: 3\n\n")) as origin, ProviderHttp(trust_env=False) as client:
        headers = client.headers({})
        response = await client.post(origin.url, b"{}", headers, connect_timeout=5)
        assert await response.next_chunk() == b"data: 1\n\n"
        await response.aclose()  # unfinished: closed, not pooled
        await origin.ended[0].wait()
        # Cancelled mid-body, as a run's stop cancels its reader: the connection goes too.
        response = await client.post(origin.url, b"{}", headers, connect_timeout=5)
        assert await response.next_chunk() == b"data: 1\n\n"
        reader = asyncio.ensure_future(response.next_chunk())
        await asyncio.sleep(0)
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        await response.aclose()
        await origin.ended[1].wait()
        assert await _read_all(await client.post(origin.url, b"{}", headers, connect_timeout=5)) == b"data: 3\n\n"
    assert [len(requests) for requests in origin.connections] == [1, 1, 1]


async def test_interim_answers_are_skipped_and_a_compressed_body_is_decoded() -> None:
    body = gzip.compress(b"data: zipped\n\n")
    reply = b"HTTP/1.1 100 Continue\r\n\r\n" + _whole(body, b"content-encoding: gzip\r\n")
    async with _Origin(reply) as origin, ProviderHttp(trust_env=False) as client:
        response = await client.post(origin.url, b"{}", client.headers({}), connect_timeout=5)
        assert response.status == 200
        assert await _read_all(response) == b"data: zipped\n\n"


async def test_a_repeated_retry_after_or_content_type_is_read_as_its_first_value() -> None:
    # Joined (", ") a repeated Retry-After would read as no number at all, and the retry would not
    # wait as the provider asked; the first value is the one a provider meant (HTTP allows one).
    reply = (b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 7\r\nretry-after: 30\r\ncontent-type: application/json\r\n"
             b"content-type: text/plain\r\ncontent-length: 2\r\n\r\n{}")
    async with _Origin(reply) as origin, ProviderHttp(trust_env=False) as client:
        response = await client.post(origin.url, b"{}", client.headers({}), connect_timeout=5)
        await _read_all(response)
    assert (response.status, response.headers["content-type"]) == (429, "application/json")
    assert parse_retry_after(response.headers) == 7.0


async def test_a_garbled_answer_is_an_http_error_naming_aiohttps_parse_error() -> None:
    async with _Origin(b"SPDY/9 what\r\n\r\n") as origin, ProviderHttp(trust_env=False) as client:
        with pytest.raises(HttpError) as garbled:
            await client.post(origin.url + "/v1", b"{}", client.headers({}), connect_timeout=5)
        await origin.ended[0].wait()  # the connection is closed, not pooled
    assert type(garbled.value.__cause__).__name__ == "ClientResponseError"
    assert "Bad status line" in str(garbled.value) and origin.url + "/v1" in str(garbled.value)


async def test_a_provider_that_drops_the_connection_before_answering_is_an_http_error() -> None:
    async with _Origin(b"", close_after_reply=True) as origin, ProviderHttp(trust_env=False) as client:
        with pytest.raises(HttpError) as dropped:
            await client.post(origin.url, b"{}", client.headers({}), connect_timeout=5)
    assert type(dropped.value.__cause__.__cause__).__name__ == "ServerDisconnectedError"  # httpx's, chaining aiohttp's


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context for 127.0.0.1 and a client context that trusts it (and nothing else)."""
    cert = self_signed("localhost", ips=("127.0.0.1",))
    tmp = tmp_path_factory.mktemp("tls")
    (tmp / "ca.pem").write_bytes(cert.cert_pem)
    return cert.server_context(tmp), ssl.create_default_context(cafile=str(tmp / "ca.pem"))


@pytest.mark.filterwarnings("error::DeprecationWarning")  # nothing the next aiohttp drops
async def test_tls_to_the_provider_directly_and_through_a_proxys_connect_tunnel(
    certificate: tuple[ssl.SSLContext, ssl.SSLContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    server_tls, client_tls = certificate
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with _Origin(_whole(b"data: direct\n\n"), _whole(b"data: tunnelled\n\n"), _whole(b"data: again\n\n"), tls=server_tls) as origin:
        async with ProviderHttp(verify=client_tls, trust_env=False) as client:
            assert await _read_all(await client.post(origin.url, b"{}", client.headers({}), connect_timeout=5)) == b"data: direct\n\n"
        with FakeCorporateProxy() as proxy:
            monkeypatch.setenv("HTTPS_PROXY", proxy.url.replace("http://", "http://me:s3cret@"))
            async with ProviderHttp(verify=client_tls) as client:
                for expected in (b"data: tunnelled\n\n", b"data: again\n\n"):  # the tunnel is kept alive
                    assert await _read_all(await client.post(origin.url + "/v1", b"{}", client.headers({}), connect_timeout=5)) == expected
    port = origin.url.rsplit(":", 1)[1]
    assert proxy.connects == [f"127.0.0.1:{port}"] and proxy.auth == ["Basic bWU6czNjcmV0"]
    assert [len(requests) for requests in origin.connections] == [1, 2]
    assert origin.connections[1][0].startswith(b"POST /v1 HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n" % port.encode())
    assert b"roxy-" not in origin.connections[1][0]  # the proxy's credentials stay with the proxy


async def test_a_provider_whose_certificate_is_not_trusted_is_refused(certificate: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    async with _Origin(_whole(b"never"), tls=certificate[0]) as origin, ProviderHttp(trust_env=False) as client:
        with pytest.raises(HttpError) as refused:
            await client.post(origin.url, b"{}", client.headers({}), connect_timeout=5)
    assert "certificate verify failed" in str(refused.value)
    assert origin.connections == []


def test_the_aiohttp_internals_the_client_reads_a_response_with_are_there() -> None:
    """`http_client._exchange` reads an answer with aiohttp's response protocol, below its public
    API: if aiohttp renames or reshapes these, this says so before anything else fails."""
    assert {"skip_payload", "read_until_eof", "auto_decompress"} <= inspect.signature(ResponseHandler.set_response_params).parameters.keys()
    assert inspect.iscoroutinefunction(ResponseHandler.read)
    assert "_parser" in BaseProtocol.__slots__  # the parser a kept connection reads its next answer with
    assert {"loop", "proxy"} <= inspect.signature(ClientRequest).parameters.keys()
    assert {"proxy", "proxy_auth", "proxy_headers"} <= inspect.signature(ClientRequest.update_proxy).parameters.keys()
