"""Error classification details, in-stream key redaction, and failover between adapters."""
from __future__ import annotations

import email.utils
import time

import msgspec
import pytest

from cursor_byok.config import ProviderKind
from cursor_byok.providers import (
    AuthError,
    BadRequestError,
    ContextLengthError,
    FailoverProvider,
    Message,
    MismatchError,
    ModelNotFoundError,
    ModelRequest,
    OverloadedError,
    PermissionDeniedError,
    RateLimitError,
    RetryPolicy,
    ServerError,
    StreamCutError,
    TextDelta,
    TextPart,
    make_provider,
)
from tests.fakes import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES, FakeProviderServer, Reply, fake_model, sse

REQUEST = ModelRequest(model="ignored", system="s", messages=[Message("user", [TextPart("hi")])], max_tokens=64)
KEY = "sk-canary-in-stream-0123456789"


def provider(kind: ProviderKind, server: FakeProviderServer, client, retries: int = 0, **kw):
    return make_provider(fake_model(kind, server.url, **kw), KEY, client, retry=RetryPolicy(max_retries=retries))


async def collect(p) -> list:
    return [e async for e in p.stream(REQUEST)]


def json_reply(status: int, payload: dict, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, body=msgspec.json.encode(payload), content_type="application/json",
                 headers=headers or {})


async def test_quota_exhaustion_is_a_rate_limit_that_is_not_retried(fake_server, http_client) -> None:
    fake_server.enqueue(json_reply(429, {"error": {"message": "You exceeded your current quota.",
                                                   "type": "insufficient_quota", "code": "insufficient_quota"}}))
    with pytest.raises(RateLimitError) as info:
        await collect(provider(ProviderKind.OPENAI_CHAT, fake_server, http_client, retries=3))
    assert not info.value.retryable and len(fake_server.requests) == 1


async def test_retry_after_as_http_date(fake_server, http_client) -> None:
    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    fake_server.enqueue(ANTHROPIC.rate_limited({"retry-after": when}))
    with pytest.raises(RateLimitError) as info:
        await collect(provider(ProviderKind.ANTHROPIC, fake_server, http_client))
    assert 100 < info.value.retry_after <= 121


async def test_a_retry_after_beyond_the_policy_is_not_waited_out(fake_server, http_client) -> None:
    fake_server.enqueue(ANTHROPIC.rate_limited({"retry-after": "3600"}))
    with pytest.raises(RateLimitError):
        await collect(provider(ProviderKind.ANTHROPIC, fake_server, http_client, retries=3))
    assert len(fake_server.requests) == 1


@pytest.mark.parametrize(("status", "payload", "expected"), [
    (413, {"type": "error", "error": {"type": "request_too_large", "message": "Request exceeds the maximum size"}},
     ContextLengthError),
    (400, {"error": {"message": "This model's maximum context length is 8192 tokens", "type": "BadRequestError"}},
     ContextLengthError),  # vLLM-style wording without a code
    (404, {"error": {"message": "The model `nope` does not exist", "type": "invalid_request_error"}}, ModelNotFoundError),
    (404, {"error": {"message": "Not Found", "type": "not_found_error"}}, MismatchError),  # a path, not a model
    (400, {"error": {"message": "bad tool schema", "type": "invalid_request_error"}}, BadRequestError),
    (403, {"type": "error", "error": {"type": "permission_error", "message": "no access"}}, PermissionDeniedError),
    (500, {"error": {"message": "boom", "type": "server_error"}}, ServerError),
    (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, OverloadedError),
])
async def test_status_classification(fake_server, http_client, status, payload, expected) -> None:
    fake_server.enqueue(json_reply(status, payload))
    with pytest.raises(expected) as info:
        await collect(provider(ProviderKind.OPENAI_CHAT, fake_server, http_client))
    assert info.value.status == status


async def test_plain_text_error_body(fake_server, http_client) -> None:
    fake_server.enqueue(Reply(status=502, body=b"<html>Bad Gateway</html>", content_type="text/html"))
    with pytest.raises(ServerError, match="Bad Gateway"):
        await collect(provider(ProviderKind.OPENAI_RESPONSES, fake_server, http_client))


async def test_non_stream_success_body_is_an_error(fake_server, http_client) -> None:
    fake_server.enqueue(json_reply(200, {"id": "x", "choices": []}))
    with pytest.raises(MismatchError, match="expected an event stream"):
        await collect(provider(ProviderKind.OPENAI_CHAT, fake_server, http_client, retries=2))
    assert len(fake_server.requests) == 1  # asking again cannot help


@pytest.mark.parametrize(("configured", "answering"), [
    (ProviderKind.OPENAI_CHAT, ANTHROPIC),
    (ProviderKind.ANTHROPIC, OPENAI_CHAT),
    (ProviderKind.OPENAI_RESPONSES, OPENAI_CHAT),
    (ProviderKind.OPENAI_CHAT, OPENAI_RESPONSES),
])
async def test_a_stream_in_another_providers_format_is_a_mismatch(fake_server, http_client, configured, answering) -> None:
    fake_server.enqueue(answering.text(["hello"]))
    p = provider(configured, fake_server, http_client, retries=2)
    with pytest.raises(MismatchError) as info:
        await collect(p)
    assert len(fake_server.requests) == 1
    explained = info.value.explain()
    assert f"the answer from {p.model.base_url} is not in the {configured.value} format model {p.model.id} is configured for" in explained
    assert "check its `provider` kind and `base_url`" in explained


async def test_explanations_name_the_model_the_status_and_what_to_wait(fake_server, http_client) -> None:
    fake_server.enqueue(OPENAI_CHAT.auth_error(echo=KEY), OPENAI_CHAT.rate_limited({"retry-after": "20"}))
    p = provider(ProviderKind.OPENAI_CHAT, fake_server, http_client)
    with pytest.raises(AuthError) as auth:
        await collect(p)
    assert auth.value.explain().startswith(f"the provider rejected the API key for model {p.model.id} (HTTP 401)")
    assert KEY not in auth.value.explain()
    with pytest.raises(RateLimitError) as limited:
        await collect(p)
    assert limited.value.explain().startswith(f"the provider is rate-limiting model {p.model.id} (HTTP 429); retry after 20s")


async def test_a_failure_is_logged_once_with_status_and_request_id_never_the_key(fake_server, http_client, caplog) -> None:
    fake_server.enqueue(Reply(status=401, body=msgspec.json.encode({"error": {"message": f"bad key {KEY}", "code": "invalid_api_key"}}),
                              content_type="application/json", headers={"x-request-id": "req_abc123"}))
    with caplog.at_level("WARNING", logger="cursor_byok.providers"), pytest.raises(AuthError) as info:
        await collect(provider(ProviderKind.OPENAI_CHAT, fake_server, http_client))
    assert info.value.request_id == "req_abc123"
    [record] = [r for r in caplog.records if r.getMessage().startswith("provider request failed")]
    assert (record.status, record.provider_request_id, record.error_kind) == (401, "req_abc123", "auth")
    assert KEY not in record.getMessage() and "[REDACTED]" in record.getMessage()


async def test_key_echoed_inside_a_stream_is_redacted(fake_server, http_client) -> None:
    start = ANTHROPIC.text(["x"]).chunks[0]
    fake_server.enqueue(Reply(chunks=[start, sse({"type": "error", "error": {
        "type": "authentication_error", "message": f"key {KEY} was revoked"}}, "error")]))
    with pytest.raises(AuthError) as info:
        await collect(provider(ProviderKind.ANTHROPIC, fake_server, http_client))
    assert KEY not in str(info.value) and KEY not in repr(info.value) and "[REDACTED]" in str(info.value)


async def test_failover_moves_on_only_before_output(http_client) -> None:
    with FakeProviderServer() as first, FakeProviderServer() as second:
        first.enqueue(ANTHROPIC.overloaded())
        second.enqueue(OPENAI_CHAT.text(["from the backup"]))
        a = make_provider(fake_model(ProviderKind.ANTHROPIC, first.url, model="claude-main"), KEY, http_client,
                          retry=RetryPolicy(max_retries=0))
        b = make_provider(fake_model(ProviderKind.OPENAI_CHAT, second.url, model="gpt-backup"), KEY, http_client,
                          retry=RetryPolicy(max_retries=0))
        events = await collect(FailoverProvider([a, b]))
        assert [e.text for e in events if isinstance(e, TextDelta)] == ["from the backup"]
        assert first.requests[0].json()["model"] == "claude-main"
        assert second.requests[0].json()["model"] == "gpt-backup"

        # A request the provider rejects is not sent elsewhere.
        first.enqueue(ANTHROPIC.context_length())
        with pytest.raises(ContextLengthError):
            await collect(FailoverProvider([a, b]))
        assert len(second.requests) == 1

        # After output has streamed, a failure is final.
        cut = ANTHROPIC.text(["partial", "rest"])
        cut.cut_after = len(cut.chunks) - 4
        first.enqueue(cut)
        seen = []
        with pytest.raises(StreamCutError):
            async for event in FailoverProvider([a, b]).stream(REQUEST):
                seen.append(event)
        assert TextDelta("partial") in seen and len(second.requests) == 1
