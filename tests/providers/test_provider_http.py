"""The provider HTTP client on its own: what it sends through a proxy the environment names, and how
a failure below HTTP reaches the adapters."""
from __future__ import annotations

import pytest

from cursor_byok.http_client import HttpError, ProviderHttp
from tests.fakes import FakeCorporateProxy
from tests.harness.server import free_port


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
