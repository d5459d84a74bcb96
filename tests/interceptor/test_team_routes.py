"""TeamRoutes as a pure router (the wire is covered by tests/e2e/test_connect.py): which transports
go to the team server, decided by their seqno-0 append."""
from __future__ import annotations

import asyncio
import uuid

from cursor_byok.interceptor import TeamRoutes, TeamServer, own_entries
from cursor_byok.protocol import agent_pb2 as pb, side_pb2
from tests.harness.ide import append_body, envelope, heartbeat_message, run_request

TEAM = TeamServer("https://team.example", "token-0123456789abcdef", frozenset({"byok-team"}))
RUN_SSE = "/agent.v1.AgentService/RunSSE"
APPEND = "/aiserver.v1.BidiService/BidiAppend"


def stream_body(request_id: str) -> bytes:
    return envelope(pb.BidiRequestId(request_id=request_id).SerializeToString())


def test_the_team_serves_its_ids_and_their_variants_only() -> None:
    assert TEAM.serves("byok-team") and TEAM.serves("byok-team-high") and TEAM.serves("byok-team-1m-high-fast")
    assert not TEAM.serves("byok-teamwork") and not TEAM.serves("claude-4.5-sonnet") and not TEAM.serves("")


async def test_a_transport_follows_its_first_append() -> None:
    routes = TeamRoutes(TEAM)
    ours, theirs = uuid.uuid4().hex, uuid.uuid4().hex
    assert await routes.to_team(APPEND, append_body(ours, 0, run_request("hi", model="byok-team-high", conversation_id="c")), "identity")
    assert not await routes.to_team(APPEND, append_body(theirs, 0, run_request("hi", model="gpt-5", conversation_id="c")), "identity")
    assert await routes.to_team(APPEND, append_body(ours, 1, heartbeat_message()), "identity")
    assert not await routes.to_team(APPEND, append_body(theirs, 1, heartbeat_message()), "identity")
    assert await routes.to_team(RUN_SSE, stream_body(ours), "identity")
    assert not await routes.to_team(RUN_SSE, stream_body(theirs), "identity")


async def test_an_early_runsse_waits_for_its_first_append() -> None:
    routes = TeamRoutes(TEAM)
    rid = uuid.uuid4().hex
    waiting = asyncio.ensure_future(routes.to_team(RUN_SSE, stream_body(rid), "identity"))
    await asyncio.sleep(0)  # it is waiting (a yield, not a wait for time)
    assert not waiting.done()
    assert await routes.to_team(APPEND, append_body(rid, 0, run_request("hi", model="byok-team", conversation_id="c")), "identity")
    assert await waiting is True


async def test_what_cannot_be_told_goes_to_cursor() -> None:
    routes = TeamRoutes(TEAM, wait_seconds=0.0)
    assert not await routes.to_team(APPEND, b"\xff\xff not protobuf", "identity")
    assert not await routes.to_team(APPEND, append_body(uuid.uuid4().hex, 3, heartbeat_message()), "identity")  # never saw seqno 0
    assert not await routes.to_team(RUN_SSE, stream_body(uuid.uuid4().hex), "identity")  # no append came


def test_own_entries_keep_only_the_teams_models() -> None:
    merged = side_pb2.AvailableModelsResponse(model_names=["gpt-5", "byok-team"])
    merged.models.add().name = "gpt-5"
    merged.models.add().name = "byok-team"
    kept = side_pb2.AvailableModelsResponse.FromString(own_entries("/aiserver.v1.AiService/AvailableModels", merged.SerializeToString(), {"byok-team"}))
    assert list(kept.model_names) == ["byok-team"] and [m.name for m in kept.models] == ["byok-team"]
    usable = side_pb2.GetUsableModelsResponse()
    usable.models.add().model_id = "gpt-5"
    usable.models.add().model_id = "byok-team"
    kept_usable = side_pb2.GetUsableModelsResponse.FromString(own_entries("/agent.v1.AgentService/GetUsableModels", usable.SerializeToString(), {"byok-team"}))
    assert [m.model_id for m in kept_usable.models] == ["byok-team"]
