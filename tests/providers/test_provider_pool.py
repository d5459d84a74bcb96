"""The provider pool: one adapter per model and key, and warm connections to every provider origin."""
from __future__ import annotations

from cursor_byok.config import ModelConfig, ProviderKind
from cursor_byok.http_client import ProviderHttp, streaming_client
from cursor_byok.providers import ProviderPool
from tests.fakes import FakeProviderServer


def model(base_url: str, model_id: str = "m", **kw: object) -> ModelConfig:
    return ModelConfig(id=model_id, provider=ProviderKind.OPENAI_CHAT, model="fake", base_url=base_url, **kw)  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_one_adapter_per_model_and_key_serves_every_run() -> None:
    async with streaming_client() as client:
        pool = ProviderPool(client)
        a, b = model("http://127.0.0.1:9/v1", "a"), model("http://127.0.0.1:9/v1", "b")
        first = pool.adapter(a, "sk-1")
        assert pool.adapter(a, "sk-1") is first
        assert pool.adapter(b, "sk-1") is not first
        assert pool.adapter(a, "sk-2") is not first  # a key changed in the secrets file is used at once


async def test_every_provider_origin_is_warmed_once_at_start() -> None:
    with FakeProviderServer(keep_alive=True) as one, FakeProviderServer(keep_alive=True) as other:
        async with streaming_client() as client:
            pool = ProviderPool(client)
            pool.track([model(one.url + "/v1", "a"), model(one.url + "/v1", "b"), model(other.url, "c")])
            assert await pool.warm_due() == 2
            assert await pool.warm_due() == 0
        assert [p.method for p in one.probes] == ["HEAD"] and len(other.probes) == 1
        assert "authorization" not in one.probes[0].headers  # a warm-up carries no key
        assert one.requests == [] and other.requests == []  # and is no model request


async def test_an_origin_in_use_is_warmed_again_before_its_connection_expires() -> None:
    clock = Clock()
    with FakeProviderServer(keep_alive=True) as server:
        async with streaming_client() as client:
            pool = ProviderPool(client, rewarm_after=25, warm_for=600, clock=clock)
            m = model(server.url)
            pool.track([m])
            await pool.warm_due()
            clock.now += 24
            assert await pool.warm_due() == 0
            clock.now += 1
            assert await pool.warm_due() == 1
            pool.adapter(m, "sk")  # a run: the connection is in use
            clock.now += 24
            assert await pool.warm_due() == 0
            clock.now += 1
            assert await pool.warm_due() == 1
        assert len(server.probes) == 3


async def test_an_origin_nobody_uses_goes_cold() -> None:
    clock = Clock()
    with FakeProviderServer(keep_alive=True) as server:
        async with streaming_client() as client:
            pool = ProviderPool(client, rewarm_after=25, warm_for=100, clock=clock)
            pool.track([model(server.url)])
            await pool.warm_due()
            warmed = 1
            for _ in range(10):  # 250 s without a run
                clock.now += 25
                warmed += await pool.warm_due()
        assert warmed == 1 + 4  # kept warm for its first 100 s, then left alone
        assert len(server.probes) == warmed


async def test_an_unreachable_provider_does_not_break_warming(unused_tcp_port: int) -> None:
    with FakeProviderServer(keep_alive=True) as server:
        client: ProviderHttp
        async with streaming_client() as client:
            pool = ProviderPool(client)
            pool.track([model(f"http://127.0.0.1:{unused_tcp_port}/v1", "dead"), model(server.url, "alive")])
            assert await pool.warm_due() == 2
        assert len(server.probes) == 1
