"""pytest fixtures for the fake provider servers; import them into a conftest.py."""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import ssl

import pytest
import pytest_asyncio

from cursor_byok.http_client import ProviderHttp, streaming_client

from .server import FakeProviderServer

# Loading CA certificates costs ~0.1 s per client; the fakes speak plain HTTP, so share one context.
_TLS = ssl.create_default_context()


@pytest.fixture
def fake_server() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


@pytest.fixture(scope="module")
def shared_provider() -> Iterator[FakeProviderServer]:
    """One fake provider per test module (starting one per test costs a thread and a socket)."""
    with FakeProviderServer() as server:
        yield server


@pytest.fixture
def provider(shared_provider: FakeProviderServer) -> FakeProviderServer:
    """The module's fake provider, with no recorded requests and no scripted replies left over."""
    shared_provider.forget()
    shared_provider.respond_with(None)
    return shared_provider


@pytest_asyncio.fixture
async def http_client() -> AsyncIterator[ProviderHttp]:
    async with streaming_client(verify=_TLS) as client:
        yield client
