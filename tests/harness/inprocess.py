"""The conversation domain in this process: the real store, service, output hub and run engine,
against a fake provider server, driven by the scripted IDE with its appends and RunSSE reads going
straight to the service instead of over HTTP.

For races the real server cannot hit on purpose (a Stop while history loads, an append between two
commands of the runtime): the test decides exactly when each message reaches the runtime, and can
restart (a new service on the same database) or evict between steps.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path


from cursor_byok import config as cfg, hotpath
from cursor_byok.conversation import ConversationRuntime, ConversationService, OutputHub, RuntimeServices
from cursor_byok.conversation.history import EntryKind, decode_entry
from cursor_byok.protocol import ConnectError, agent_pb2 as pb
from cursor_byok.http_client import ProviderHttp, streaming_client
from cursor_byok.run import Provider, RunEngine, make_provider
from cursor_byok.store import Store
from tests.fakes import FakeProviderServer
from tests.harness.ide import ScriptedIDE, StreamLog

MODEL = "byok-inprocess"


@dataclass
class Reply:
    """What a BidiAppend would have answered: 200, or the Connect error it would carry."""

    error: ConnectError | None = None

    @property
    def status_code(self) -> int:
        return 200 if self.error is None else 400

    @property
    def text(self) -> str:
        return "" if self.error is None else f"{self.error.code}: {self.error.message}"


class InProcessIDE(ScriptedIDE):
    """ScriptedIDE whose appends call `service.open_run` / `service.deliver` and whose RunSSE reads
    the hub's output stream; everything else (acks, tool execution, logs) is the scripted IDE's."""

    def __init__(self, rig: Rig, workspace: Path | None = None) -> None:
        super().__init__("http://in-process.invalid", workspace)
        self.rig = rig

    async def append(self, request_id: str, message: pb.AgentClientMessage, **_: object) -> Reply:  # type: ignore[override]
        service = self.rig.service
        try:
            await service.resolve(request_id)  # as the gateway does before it hands an append over
            if message.WhichOneof("message") == "run_request" and request_id not in self.seqnos:
                service.open_run(request_id, message.run_request)
            elif message.WhichOneof("message") == "client_heartbeat":
                service.heartbeat(request_id)
            else:
                service.deliver(request_id, message)
        except ConnectError as err:
            return Reply(err)
        finally:
            self.seqnos[request_id] = self.seqnos.get(request_id, 0) + 1
        return Reply()

    async def stream(self, request_id: str, log: StreamLog, *, stop: asyncio.Event | None = None, **_: object) -> StreamLog:  # type: ignore[override]
        output = await self.rig.service.hub.wait_for(request_id, 5.0)
        if output is None:
            log.broken = True
            return log
        decoder = hotpath.FrameDecoder()
        position = 0
        output.readers += 1
        self.rig.service.attach(request_id, output)
        try:
            while True:
                result = await output.read(position)
                position = result.position
                await self._take(request_id, log, decoder, result.data)
                if result.finished or (stop is not None and stop.is_set()):
                    return log
        finally:
            output.readers -= 1
            self.rig.service.detach(request_id, output)  # as the gateway does: the runtime decides what it means


class Rig:
    """One database, one fake provider; `start()` opens a service on them, `restart()` a new one
    (as a server restart would), `close()` ends it."""

    def __init__(self, tmp_path: Path, provider: FakeProviderServer, *, store_options: dict[str, object] | None = None,
                 **services: object) -> None:
        """`store_options`: more arguments of `Store.open`; `services`: of `RuntimeServices`."""
        self.path = tmp_path / "state.db"
        self.store_options = store_options or {}
        self.provider = provider
        self.model = cfg.ModelConfig(
            id=MODEL, provider=cfg.ProviderKind.OPENAI_CHAT, model="fake-model", base_url=provider.url + "/v1",
            request_timeout_seconds=10.0, idle_timeout_seconds=10.0,
        )
        self.options = {"continuation_window": 0.0, "blob_ack_timeout": 2.0, **services}
        self.store: Store | None = None
        self.http: ProviderHttp | None = None
        self.service: ConversationService

    async def start(self) -> Rig:
        self.store = await Store.open(self.path, **self.store_options)  # type: ignore[arg-type]
        self.http = streaming_client()
        http = self.http
        adapters: dict[str, Provider] = {}

        def make_engine(model: cfg.ModelConfig) -> RunEngine:
            # One adapter per model for every run, as the server's provider pool keeps them.
            if model.id not in adapters:
                adapters[model.id] = make_provider(model, "sk-test", http)
            return RunEngine(adapters[model.id])

        services = RuntimeServices(
            config=cfg.Config(models=[self.model]),
            make_engine=make_engine,
            store=self.store,
            **self.options,  # type: ignore[arg-type]
        )
        self.service = ConversationService(services, OutputHub(retention_seconds=0.0))
        await self.service.restore()
        return self

    async def close(self) -> None:
        if self.store is None:
            return
        await self.service.shutdown("test over", timeout=2.0)
        assert self.http is not None
        await self.http.aclose()
        await self.store.close()
        self.store = None

    async def restart(self) -> None:
        await self.close()
        await self.start()

    def ide(self, workspace: Path | None = None) -> InProcessIDE:
        return InProcessIDE(self, workspace)

    def runtime(self, conversation_id: str) -> ConversationRuntime | None:
        return self.service.registry.runtime(conversation_id)

    async def history(self, conversation_id: str) -> list[tuple[str, EntryKind, str]]:
        """The stored history: (event id, kind, text) per event, in seq order."""
        assert self.store is not None
        await self.store.flush()
        out = []
        for row in await self.store.load_events(conversation_id):
            entry = decode_entry(row.payload)
            text = "".join(getattr(p, "text", "") or getattr(p, "content", "") or "" for p in entry.message.parts)
            out.append((row.event_id, entry.kind, text))
        return out
