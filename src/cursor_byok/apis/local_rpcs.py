"""Side RPCs the IDE needs from a local server so it offers and accepts the configured models.

- Model lists (AvailableModels, GetUsableModels, and the REST `GET /v1/models` Cursor's SDK checks
  a model against): forwarded with the user's own headers; our models' protobuf bytes are appended
  to a 2xx protobuf reply (concatenated protobuf merges repeated fields), our entries are merged
  into a JSON reply's lists. When upstream fails, answers non-2xx or is unreachable, the reply is
  ours alone, in the codec the client asked for.
- Defaults (GetDefaultModel*, GetDefaultModelNudgeData): answered from the config.
- NetworkService/IsConnected: always connected (the IDE aborts slow work when this probe fails).
- AnalyticsService telemetry (Batch, TrackEvents, ...): accepted and dropped. The Statsig calls,
  which fetch feature configuration, are forwarded.

Asked as gRPC-Web, each is answered the same (the gateway frames the reply), a model list with
our models alone. Without configured models every model-list path is a plain passthrough. Account, usage, auth and
dashboard RPCs are never answered here: we do not forge account data or entitlements.
"""
from __future__ import annotations

import asyncio
import enum
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx

from ..config import Config, ModelConfig
from .models import ModelCatalog
from .upstream import HOP_BY_HOP, ForbiddenUpstream, MalformedTarget, Upstream, forward_headers

log = logging.getLogger("cursor_byok.local_rpcs")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

PROTO = b"application/proto"
# Flag 0, length 0: one empty IsConnectedResponse in a Connect envelope (PROTOCOL.md 1.2).
IS_CONNECTED_BODY = b"\x00\x00\x00\x00\x00"
CATALOG_TIMEOUT_SECONDS = 5.0
TELEMETRY_SERVICE = "/aiserver.v1.AnalyticsService/"
# AnalyticsService methods that fetch configuration rather than report telemetry.
ANALYTICS_CONFIG_METHODS = frozenset({"BootstrapStatsig", "GetStatsigClientKey"})
# Reply headers from upstream that no longer describe a body we rewrote.
_DROPPED_REPLY_HEADERS = HOP_BY_HOP | {b"content-encoding"}


class Rpc(enum.Enum):
    """What LocalRpcs does with a request."""

    AVAILABLE_MODELS = "available_models"
    USABLE_MODELS = "usable_models"
    REST_MODELS = "rest_models"
    DEFAULT_MODEL_FOR_CLI = "default_model_for_cli"
    DEFAULT_MODEL = "default_model"
    DEFAULT_MODEL_NUDGE_DATA = "default_model_nudge_data"
    IS_CONNECTED = "is_connected"
    DROP_TELEMETRY = "drop_telemetry"


# Upstream reply + our catalog.
MERGED_RPCS = frozenset({Rpc.AVAILABLE_MODELS, Rpc.USABLE_MODELS, Rpc.REST_MODELS})
# Served from the catalog alone (only while at least one model is configured).
CATALOG_RPCS = frozenset({Rpc.DEFAULT_MODEL_FOR_CLI, Rpc.DEFAULT_MODEL, Rpc.DEFAULT_MODEL_NUDGE_DATA})

MODEL_PATHS: dict[str, Rpc] = {
    "/aiserver.v1.AiService/AvailableModels": Rpc.AVAILABLE_MODELS,
    "/agent.v1.AgentService/GetUsableModels": Rpc.USABLE_MODELS,
    "/aiserver.v1.AiService/GetUsableModels": Rpc.USABLE_MODELS,
    "/agent.v1.AgentService/GetDefaultModelForCli": Rpc.DEFAULT_MODEL_FOR_CLI,
    "/aiserver.v1.AiService/GetDefaultModelForCli": Rpc.DEFAULT_MODEL_FOR_CLI,
    "/aiserver.v1.AiService/GetDefaultModel": Rpc.DEFAULT_MODEL,
    "/aiserver.v1.AiService/GetDefaultModelNudgeData": Rpc.DEFAULT_MODEL_NUDGE_DATA,
    "/v1/models": Rpc.REST_MODELS,
}
JSON = b"application/json"
IS_CONNECTED_PATH = "/aiserver.v1.NetworkService/IsConnected"


class _Unmergeable(Exception):
    """An upstream body we cannot add ours to (end-stream envelope, another codec, broken JSON)."""


class _ClientGone(Exception):
    """The IDE disconnected before its request body was complete: nobody to answer."""


class _BodyTimeout(Exception):
    """The request body was not complete in time."""


def _within(receive: Receive, seconds: float) -> Receive:
    """`receive`, bounded: the whole body must arrive within `seconds` of the first call."""
    deadline: float | None = None

    async def bounded() -> Message:
        nonlocal deadline
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + seconds
        try:
            async with asyncio.timeout_at(deadline):
                return await receive()
        except TimeoutError:
            raise _BodyTimeout from None

    return bounded


class LocalRpcs:
    def __init__(
        self, config: Config, upstream: Upstream, *, catalog_timeout: float = CATALOG_TIMEOUT_SECONDS
    ) -> None:
        self.upstream = upstream
        self.catalog_timeout = catalog_timeout
        self.max_body_bytes = config.server.max_body_bytes
        self.body_timeout = config.server.body_read_timeout_seconds
        self.use_models(config.models)

    def use_models(self, models: list[ModelConfig]) -> None:
        """Serve the catalog of `models` from now on (at start, and when the config is reloaded)."""
        self.catalog = ModelCatalog.of(models)
        self._bodies: dict[Rpc, bytes] = {
            Rpc.AVAILABLE_MODELS: self.catalog.available_models,
            Rpc.USABLE_MODELS: self.catalog.usable_models,
            Rpc.DEFAULT_MODEL_FOR_CLI: self.catalog.default_model_for_cli,
            Rpc.DEFAULT_MODEL: self.catalog.default_model,
            Rpc.DEFAULT_MODEL_NUDGE_DATA: self.catalog.default_model_nudge_data,
        }
        # Rpc values name the catalog's documents.
        self._documents = {rpc: self.catalog.json[rpc.value] for rpc in self._bodies}
        self._documents[Rpc.REST_MODELS] = self.catalog.rest_models

    def route(self, path: str) -> Rpc | None:
        """What we do for `path`; None means: forward it untouched."""
        if path == IS_CONNECTED_PATH:
            return Rpc.IS_CONNECTED
        if path.startswith(TELEMETRY_SERVICE):
            method = path[len(TELEMETRY_SERVICE) :]
            telemetry = method and "/" not in method and method not in ANALYTICS_CONFIG_METHODS
            return Rpc.DROP_TELEMETRY if telemetry else None
        rpc = MODEL_PATHS.get(path)
        return rpc if rpc is not None and self.catalog else None

    def handles(self, path: str) -> bool:
        return self.route(path) is not None

    async def handle(self, scope: Scope, receive: Receive, send: Send, *, grpc_web: bool = False) -> None:
        """`grpc_web`: the request is gRPC-Web, whose framing the gateway's `send` writes."""
        try:
            await self._handle(scope, _within(receive, self.body_timeout), send, grpc_web)
        except _ClientGone:
            log.debug("client left before its request was read", extra={"path": scope["path"]})
        except _BodyTimeout:
            # Nothing was answered yet (bodies are read first); the rest of the body never came.
            message = f"request body not received within {self.body_timeout:g}s (server.body_read_timeout_seconds)"
            body = json.dumps({"code": "deadline_exceeded", "message": message}).encode()
            await _reply(send, 408, body, [(b"content-type", b"application/json"), (b"connection", b"close")])

    async def _handle(self, scope: Scope, receive: Receive, send: Send, grpc_web: bool) -> None:
        rpc = self.route(scope["path"])
        verb = "GET" if rpc is Rpc.REST_MODELS else "POST"  # what a model list is asked with
        if rpc is None or (rpc in MERGED_RPCS | CATALOG_RPCS and scope["method"] != verb):
            await self.upstream.forward(scope, receive, send)
        elif rpc in (Rpc.IS_CONNECTED, Rpc.DROP_TELEMETRY):
            await _drain(receive)
            if _is_json(scope):  # an empty message in the codec it was asked in
                await _reply(send, 200, b"{}", [(b"content-type", b"application/json")])
            elif rpc is Rpc.IS_CONNECTED and not grpc_web:  # the gateway frames gRPC-Web's itself
                await _reply(send, 200, IS_CONNECTED_BODY, [(b"content-type", PROTO)])
            else:
                await _reply(send, 200, b"", [(b"content-type", PROTO)])
        elif rpc in CATALOG_RPCS:
            await _drain(receive)
            await self._ours(rpc, _is_json(scope), send)
        else:
            await self._merged(rpc, scope, receive, send, grpc_web)

    async def _ours(self, rpc: Rpc, as_json: bool, send: Send) -> None:
        if as_json:
            await _reply(send, 200, json.dumps(self._documents[rpc]).encode(), [(b"content-type", JSON)])
        else:
            await _reply(send, 200, self._bodies[rpc], [(b"content-type", PROTO)])

    # -- upstream reply + ours -----------------------------------------------------------------------
    async def _merged(self, rpc: Rpc, scope: Scope, receive: Receive, send: Send, grpc_web: bool) -> None:
        as_json = rpc is Rpc.REST_MODELS or _is_json(scope)
        body = await _read_body(receive, self.max_body_bytes)
        if body is None:
            await _reply_json_error(send, 429, "resource_exhausted", "request body too large")
            return
        if grpc_web:
            # Upstream's gRPC-Web reply ends in its trailer frame, which our bytes cannot follow:
            # the list is ours alone (the gateway frames it).
            await self._ours(rpc, False, send)
            return
        try:
            url = self.upstream.target_url(scope)
        except (ForbiddenUpstream, MalformedTarget):
            await self.upstream.forward(scope, receive, send, body=body)  # answers 403 / 400
            return
        fetched = await self._fetch(scope, url, body)
        if fetched is None:
            await self._ours(rpc, as_json, send)
            return
        status, headers, upstream_body = fetched
        try:
            if as_json != (b"json" in _header(headers, b"content-type")):
                raise _Unmergeable("upstream answered in another codec than the one asked")
            if as_json:
                merged = json.dumps(_merged_json(upstream_body, self._documents[rpc])).encode()
            else:
                merged = _append(upstream_body, self._bodies[rpc])
        except _Unmergeable as exc:
            why = str(exc)
            log.warning("upstream model list not mergeable; serving ours", extra={"rpc": rpc.value, "why": why})
            await self._ours(rpc, as_json, send)
            return
        kept = [(k, v) for k, v in headers if k.lower() not in _DROPPED_REPLY_HEADERS]
        log.info("merged model list", extra={"rpc": rpc.value, "models": len(self.catalog.models)})
        await _reply(send, status, merged, kept)

    async def _fetch(
        self, scope: Scope, url: httpx.URL, body: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
        """Status, headers and (decoded) body of a 2xx upstream reply; None on any failure."""
        client = self.upstream.client
        headers = forward_headers(scope["headers"], None if scope["method"] == "GET" else len(body))
        request = client.build_request(
            scope["method"], url, headers=headers, content=body, timeout=httpx.Timeout(self.catalog_timeout)
        )
        try:
            async with asyncio.timeout(self.catalog_timeout):
                response = await client.send(request, stream=True)
                try:
                    if not 200 <= response.status_code < 300:
                        status = response.status_code
                        log.warning("upstream model list refused; serving ours", extra={"status": status})
                        return None
                    chunks: list[bytes] = []
                    size = 0
                    async for chunk in response.aiter_bytes():  # decoded: content-encoding undone
                        size += len(chunk)
                        if size > self.max_body_bytes:
                            log.warning("upstream model list too large; serving ours", extra={"bytes": size})
                            return None
                        chunks.append(chunk)
                    return response.status_code, list(response.headers.raw), b"".join(chunks)
                finally:
                    await response.aclose()
        except (httpx.HTTPError, TimeoutError) as exc:
            log.warning("upstream model list unavailable; serving ours", extra={"error": type(exc).__name__})
            return None


def _append(upstream_body: bytes, ours: bytes) -> bytes:
    """Upstream's message followed by ours; a one-envelope body keeps its envelope, re-lengthed.

    A protobuf message never starts with byte 0, 1 or 2 (field number 0), so a body starting with
    one of them whose length field fills it exactly is a Connect envelope.
    """
    size = len(upstream_body)
    if size >= 5 and upstream_body[0] <= 2 and int.from_bytes(upstream_body[1:5], "big") == size - 5:
        flag = upstream_body[0]
        if flag != 0:
            raise _Unmergeable(f"envelope flag {flag}")
        payload = upstream_body[5:] + ours
        return b"\x00" + len(payload).to_bytes(4, "big") + payload
    return upstream_body + ours


def _merged_json(upstream_body: bytes, ours: dict[str, Any]) -> dict[str, Any]:
    """Upstream's JSON document with ours merged in as protobuf merges messages: lists joined,
    other fields ours. An upstream entry naming a model of ours is dropped: that model runs here."""
    try:
        theirs = json.loads(upstream_body)
    except ValueError as exc:
        raise _Unmergeable(f"not JSON: {exc}") from None
    if not isinstance(theirs, dict):
        raise _Unmergeable("not a JSON object")
    merged = dict(theirs)
    for key, value in ours.items():
        listed = theirs.get(key)
        if isinstance(value, list) and isinstance(listed, list):
            taken = {_identity(entry) for entry in value}
            merged[key] = [entry for entry in listed if _identity(entry) not in taken] + value
        else:
            merged[key] = value
    return merged


def _identity(entry: object) -> str:
    """What names a list entry: a model's id (REST `id`, ModelDetails `modelId`, AvailableModel
    `name`), else the entry itself."""
    if isinstance(entry, dict):
        for key in ("id", "modelId", "name"):
            if isinstance(entry.get(key), str):
                return entry[key]
    return json.dumps(entry, sort_keys=True)


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes:
    for k, v in headers:
        if k.lower() == name:
            return v.lower()
    return b""


def _is_json(scope: Scope) -> bool:
    return b"json" in _header(scope["headers"], b"content-type")


async def _drain(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        if not message.get("more_body", False):
            return


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None past `limit` (the rest is drained)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size <= limit and chunk:
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks) if size <= limit else None


async def _reply(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _reply_json_error(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps({"code": code, "message": message}).encode()
    await _reply(send, status, body, [(b"content-type", b"application/json")])
