"""In front of a team server (`cursor-byok connect`): which of Cursor's requests go to it.

The agent RPCs of the team's models go to the team server with the developer's token; everything
else goes to Cursor's own upstream exactly as Cursor sent it, without the token. A transport's
route is decided by its seqno-0 BidiAppend (the run request names the model), as the gateway
decides local vs upstream; its later appends and its RunSSE follow that decision by request id,
and a RunSSE that comes before its first append waits for it (for `wait_seconds`; then Cursor's
upstream has it, as it would without us). The model lists Cursor asks for come from Cursor with
the team's entries added (concatenated protobuf merges repeated fields), so the picker offers both.

Decisions are made on HTTP/1.1 requests: the proxy offers only HTTP/1.1 in front of a team server
(Cursor then runs the agent as RunSSE + BidiAppend, as `cursor enable` sets it up by default).
"""
from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..protocol import (
    BIDI_APPEND_PATH, RUN_SSE_PATH, ConnectError, agent_pb2, decode_bidi_append, decode_unary, requested_model_id, side_pb2, which,
)

log = logging.getLogger("cursor_byok.interceptor")

AVAILABLE_MODELS_PATH = "/aiserver.v1.AiService/AvailableModels"
USABLE_MODELS_PATHS = frozenset({"/agent.v1.AgentService/GetUsableModels", "/aiserver.v1.AiService/GetUsableModels"})
MODEL_LIST_PATHS = USABLE_MODELS_PATHS | {AVAILABLE_MODELS_PATH}
AGENT_PATHS = frozenset({BIDI_APPEND_PATH, RUN_SSE_PATH})
MAX_ROUTES = 8192  # request ids remembered; the oldest are forgotten first
# Never sent to the team server: the developer's Cursor session is Cursor's business, and the
# request is for the team server's own name (it refuses Cursor's as Host).
CURSOR_ONLY_HEADERS = frozenset({"authorization", "cookie", "host"})


@dataclass(frozen=True)
class TeamServer:
    """A team server as `connect` found it: its URL, the developer's token, the model ids it serves
    (with their variant aliases) and its own entries of Cursor's model lists (protobuf, by path)."""

    url: str
    token: str = field(repr=False)
    model_ids: frozenset[str]
    listed: dict[str, bytes] = field(default_factory=dict)

    def serves(self, model_id: str) -> bool:
        """An id the team serves, or a variant of one (`<id>-<effort>`, more axes after it)."""
        return model_id in self.model_ids or any(model_id.startswith(own + "-") for own in self.model_ids)


def own_entries(path: str, body: bytes, model_ids: Iterable[str]) -> bytes:
    """The entries of the team server's answer to a model list that are the team's own models (an
    answer it merged with a list from elsewhere keeps only those)."""
    ids = set(model_ids)
    if path == AVAILABLE_MODELS_PATH:
        available = side_pb2.AvailableModelsResponse.FromString(body)
        kept = side_pb2.AvailableModelsResponse(model_names=[n for n in available.model_names if n in ids])
        kept.models.extend(m for m in available.models if m.name in ids)
        return kept.SerializeToString(deterministic=True)
    usable = side_pb2.GetUsableModelsResponse.FromString(body)
    return side_pb2.GetUsableModelsResponse(models=[m for m in usable.models if m.model_id in ids]).SerializeToString(deterministic=True)


def _run_request_model(message: agent_pb2.AgentClientMessage) -> str:
    return requested_model_id(message.run_request) if which(message, "message") == "run_request" else ""


class TeamRoutes:
    """request id → whether its transport goes to the team server, for one developer's interceptor."""

    cursor_only_headers = CURSOR_ONLY_HEADERS

    def __init__(self, team: TeamServer, wait_seconds: float = 30.0) -> None:
        self.team = team
        self.wait_seconds = wait_seconds
        self._routes: OrderedDict[str, bool] = OrderedDict()
        self._waiting: dict[str, asyncio.Future[bool]] = {}

    @staticmethod
    def is_agent_rpc(method: str, route: str) -> bool:
        """A BidiAppend or RunSSE: the team's when its transport's model is."""
        return method == "POST" and route in AGENT_PATHS

    def listed(self, method: str, route: str) -> bytes:
        """The team's entries to add to Cursor's answer to a model list (b"": not a model list)."""
        return self.team.listed.get(route, b"") if method == "POST" else b""

    async def to_team(self, route: str, body: bytes, encoding: str) -> bool:
        """Whether an agent RPC goes to the team server."""
        return self._of_append(body, encoding) if route == BIDI_APPEND_PATH else await self._of_stream(body, encoding)

    def refusal(self) -> str:
        """What the IDE is told when the team server refuses the token."""
        url = self.team.url
        return f"the team server {url} refused your developer token: ask its operator for a new one, then run `cursor-byok connect {url} --token-file FILE`"

    def _of_append(self, body: bytes, encoding: str) -> bool:
        """A seqno-0 run request decides for its whole transport; what cannot be told goes to Cursor,
        which answers it as it would have."""
        try:
            append = decode_bidi_append(body, content_encoding=encoding)
        except ConnectError:
            return False
        known = self._routes.get(append.request_id)
        if append.append_seqno != 0 or known is not None:
            return bool(known)
        model = _run_request_model(append.message)
        ours = bool(model) and self.team.serves(model)
        self._remember(append.request_id, ours)
        return ours

    async def _of_stream(self, body: bytes, encoding: str) -> bool:
        """A RunSSE: its transport's route, once its first append has decided it."""
        try:
            request_id = decode_unary(body, agent_pb2.BidiRequestId, content_encoding=encoding).request_id
        except ConnectError:
            return False
        known = self._routes.get(request_id)
        if known is not None:
            return known
        waiter = self._waiting.get(request_id)
        if waiter is None:
            waiter = self._waiting[request_id] = asyncio.get_running_loop().create_future()
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), self.wait_seconds)
        except TimeoutError:
            log.info("no first append for a RunSSE: it goes to Cursor", extra={"request_id": request_id[:64]})
            return False
        finally:
            if not waiter.done():  # given up (or the client left): nobody waits on it any more
                self._waiting.pop(request_id, None)

    def _remember(self, request_id: str, ours: bool) -> None:
        self._routes[request_id] = ours
        if len(self._routes) > MAX_ROUTES:
            self._routes.popitem(last=False)
        waiter = self._waiting.pop(request_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(ours)
