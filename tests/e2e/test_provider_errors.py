"""A provider's failure reaches the IDE with a code that says what went wrong (a bad key is not a
network problem) and a message naming the model; the server logs it with status and request id."""
from __future__ import annotations

import uuid

import msgspec
import pytest

from tests.fakes import ANTHROPIC, OPENAI_CHAT, FakeProviderServer, Reply
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.server import ServerProcess

from .conftest import MODEL

KEY = "sk-test-canary"  # what the harness puts in the model's key variable


def json_error(status: int, payload: dict, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, body=msgspec.json.encode(payload), content_type="application/json", headers=headers or {})


CASES = [
    (
        "bad key",
        json_error(401, {"error": {"message": f"Incorrect API key provided: {KEY}", "code": "invalid_api_key"}},
                   {"x-request-id": "req_401_e2e"}),
        "unauthenticated",
        f"the provider rejected the API key for model {MODEL} (HTTP 401)",
    ),
    (
        "key without access",
        json_error(403, {"error": {"message": "not allowed", "type": "permission_error"}}),
        "permission_denied",
        f"the provider refused model {MODEL} with this API key (HTTP 403)",
    ),
    (
        "unknown model",
        json_error(404, {"error": {"message": "The model `fake-model` does not exist", "code": "model_not_found"}}),
        "not_found",
        f"the provider does not know the model 'fake-model' configured for model {MODEL} (HTTP 404)",
    ),
    (
        "rate limited",
        OPENAI_CHAT.rate_limited({"retry-after": "3600"}),
        "resource_exhausted",
        f"the provider is rate-limiting model {MODEL} (HTTP 429); retry after 3600s",
    ),
    (
        "another provider's format",
        ANTHROPIC.text(["hello"]),
        "failed_precondition",
        "is not in the openai-chat format model byok-test is configured for",
    ),
]


@pytest.mark.parametrize(("name", "reply", "code", "message"), CASES, ids=[c[0] for c in CASES])
async def test_provider_failures_reach_the_ide_with_their_own_code(
    server: ServerProcess, provider: FakeProviderServer, ide: ScriptedIDE, name: str, reply: Reply, code: str, message: str
) -> None:
    provider.enqueue(reply)
    log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
    assert log.terminals == 1 and log.terminal is not None
    assert (log.terminal.code, message in log.terminal.message) == (code, True), log.terminal
    assert KEY not in log.terminal.message
    assert "Traceback" not in server.log()


async def test_the_server_logs_a_provider_failure_with_status_and_request_id(
    server: ServerProcess, provider: FakeProviderServer, ide: ScriptedIDE
) -> None:
    request_id = f"req_{uuid.uuid4().hex}"
    provider.enqueue(json_error(401, {"error": {"message": f"bad key {KEY}", "code": "invalid_api_key"}}, {"x-request-id": request_id}))
    log = await ide.turn(run_request("hi", model=MODEL, conversation_id=uuid.uuid4().hex))
    assert log.terminal is not None and log.terminal.code == "unauthenticated"
    [line] = [line for line in server.log().splitlines() if request_id in line]
    assert "provider request failed" in line and "status=401" in line and f"model={MODEL}" in line
    assert KEY not in server.log()
