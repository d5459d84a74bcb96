"""A cold start as the user meets it: `serve` is ready while its provider connections are still
being opened, and a provider that is down or never answers neither stops it nor holds it up."""
from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from pathlib import Path

import httpx

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess, free_port


class SilentProvider:
    """A provider that accepts connections and never says a word; it notes when a client gives up
    on one (closes it)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connected = threading.Event()
        self.given_up = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(conn)
            self.connected.set()
            threading.Thread(target=self._read_to_end, args=(conn,), daemon=True).start()

    def _read_to_end(self, conn: socket.socket) -> None:
        try:
            while conn.recv(4096):
                pass
        except OSError:
            return
        self.given_up.set()

    def close(self) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()


async def test_a_provider_down_or_silent_neither_stops_nor_holds_up_the_start(tmp_path: Path) -> None:
    silent = SilentProvider()
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens: the warm-up's connection is refused
    try:
        with FakeProviderServer() as working:
            models = [
                ModelSpec(id="silent", provider="openai-chat", base_url=silent.url + "/v1"),
                ModelSpec(id="down", provider="anthropic", base_url=down),
                ModelSpec(id="working", provider="openai-chat", base_url=working.url + "/v1"),
            ]
            server = ServerProcess(ServerConfig(data_dir=tmp_path / "data", models=models)).start()
            try:
                # Ready, while the warm-up's connection to the silent provider still waits for an answer.
                assert await asyncio.to_thread(silent.connected.wait, 15)
                assert not silent.given_up.is_set()  # the start did not wait for the probe to time out
                async with httpx.AsyncClient() as client:
                    health = await client.get(server.base_url + "/__byok-api__/healthz")
                assert health.status_code == 204 and "x-cursor-byok-starting" not in health.headers
                working.enqueue(OPENAI_CHAT.text(["still here"]))
                ide = ScriptedIDE(server.base_url, tmp_path)
                try:
                    log = StreamLog()
                    request_id = uuid.uuid4().hex
                    reader = asyncio.create_task(ide.stream(request_id, log))
                    await ide.append(request_id, run_request("hi", model="working", conversation_id=uuid.uuid4().hex))
                    await asyncio.wait_for(reader, 15)
                finally:
                    await ide.close()
                assert log.text == "still here" and log.terminal is None
            finally:
                assert server.stop() == 0  # the warm-up still hanging on the silent provider: a clean stop
    finally:
        silent.close()


def test_a_stop_asked_while_the_gateway_loads_is_a_clean_stop(tmp_path: Path) -> None:
    """SIGTERM as soon as the health probe answers (while the gateway is, as a rule, still loading):
    the gateway comes up, drains and exits 0, as for a stop at any later time."""
    server = ServerProcess(ServerConfig(data_dir=tmp_path / "data")).start(ready=False)
    assert server.first_health is not None and server.first_health.status_code == 204
    assert server.stop() == 0
    assert "serving" in server.log()  # it did come up before it stopped
