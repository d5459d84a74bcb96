"""The candidates the provider-request benchmark measures against aiohttp, each on one kept-alive
connection (plain TCP only: no TLS, proxy, timeouts or pool: the least such a client would cost):

- `H11Connection`: h11 both ways over an asyncio Protocol. Its pure-Python parser loses to aiohttp's
  C parser per streamed read.
- `HybridConnection`: h11 writes the request at once (no task, no loop pass before the bytes leave);
  aiohttp's own connection protocol reads the answer (its C parser and stream reader, as a session
  would read it). `ProviderHttp` now works this way, on aiohttp's pool (with its TLS, proxies and
  connect timeout) and with each request's head written by h11 once per provider: this bare
  candidate stays as the measure of what that handling costs.

Measured in benchmarks/test_provider_request.py."""
from __future__ import annotations

import asyncio

import h11
from aiohttp.client_proto import ResponseHandler
from aiohttp.streams import StreamReader


class H11Connection(asyncio.Protocol):
    """One connection; `post` sends a request and waits for its response head, `read` returns the
    body's next bytes (b"" at its end, the connection then ready for the next request)."""

    def __init__(self) -> None:
        self._h11 = h11.Connection(h11.CLIENT)
        self._transport: asyncio.Transport | None = None
        self._arrived: asyncio.Future[None] | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> H11Connection:
        _, connection = await asyncio.get_running_loop().create_connection(cls, host, port)
        return connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._h11.receive_data(data)
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self._h11.receive_data(b"")
        self._wake()

    def _wake(self) -> None:
        if self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)

    async def _next_event(self) -> object:
        while (event := self._h11.next_event()) is h11.NEED_DATA:
            self._arrived = asyncio.get_running_loop().create_future()
            await self._arrived
        return event

    async def post(self, target: str, headers: list[tuple[str, str]], body: bytes) -> h11.Response:
        assert self._transport is not None
        send = self._h11.send
        self._transport.write(
            send(h11.Request(method="POST", target=target, headers=[*headers, ("content-length", str(len(body)))]))  # type: ignore[operator]
            + send(h11.Data(data=body))
            + send(h11.EndOfMessage())
        )
        event = await self._next_event()
        assert isinstance(event, h11.Response), event
        return event

    async def read(self) -> bytes:
        event = await self._next_event()
        if isinstance(event, h11.Data):
            return bytes(event.data)
        assert isinstance(event, h11.EndOfMessage), event
        self._h11.start_next_cycle()
        return b""

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class HybridConnection:
    """`post` writes the request with h11 and waits for aiohttp's parse of the response head; `read`
    returns the body's next bytes (b"" at its end)."""

    def __init__(self, protocol: ResponseHandler) -> None:
        self._protocol = protocol
        self._body: StreamReader | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> HybridConnection:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(lambda: ResponseHandler(loop), host, port)
        return cls(protocol)

    async def post(self, target: str, headers: list[tuple[str, str]], body: bytes) -> int:
        writer = h11.Connection(h11.CLIENT)  # serialises this one request
        assert self._protocol.transport is not None
        self._protocol.transport.write(
            writer.send(h11.Request(method="POST", target=target, headers=[*headers, ("content-length", str(len(body)))]))  # type: ignore[operator]
            + writer.send(h11.Data(data=body))
            + writer.send(h11.EndOfMessage())
        )
        self._protocol.set_response_params(auto_decompress=False)
        message, self._body = await self._protocol.read()
        return message.code

    async def read(self) -> bytes:
        assert self._body is not None
        return await self._body.readany()

    def close(self) -> None:
        self._protocol.close()
