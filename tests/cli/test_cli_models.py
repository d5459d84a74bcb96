"""`models list` and `models test` (against a local OpenAI-chat-compatible SSE server)."""
from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

KEY = "sk-cli-test-do-not-print"


class FakeOpenAIChat(BaseHTTPRequestHandler):
    """POST /v1/chat/completions streaming `data: {chunk}` lines, then `data: [DONE]`."""

    requests: list[dict] = []
    status = 200
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("authorization"), "body": body})
        if self.status != 200:
            payload = json.dumps({"error": {"message": "invalid api key", "type": "invalid_request_error"}}).encode()
            self.send_response(self.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": body["model"]}
        chunks = [
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
            {**base, "choices": [{"index": 0, "delta": {"content": "Hello"}, "finish_reason": None}]},
            {**base, "choices": [{"index": 0, "delta": {"content": " from the"}, "finish_reason": None}]},
            {**base, "choices": [{"index": 0, "delta": {"content": " fake."}, "finish_reason": "stop"}]},
            {**base, "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}},
        ]
        for chunk in chunks:
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
            time.sleep(0.01)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


@pytest.fixture
def fake_openai() -> Iterator[tuple[str, type[FakeOpenAIChat]]]:
    handler = type("Handler", (FakeOpenAIChat,), {"requests": [], "status": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    finally:
        server.shutdown()
        server.server_close()


def model_block(model_id: str, base_url: str, *, key_env: str = "CLI_TEST_OPENAI_KEY", window: int = 128000) -> str:
    return (
        f'[[models]]\nid = "{model_id}"\nprovider = "openai-chat"\nbase_url = "{base_url}"\n'
        f'model = "gpt-fake"\napi_key_env = "{key_env}"\ncontext_window = {window}\n'
    )


def test_models_list_shows_models_and_whether_keys_are_present(run_cli, write_config, monkeypatch):
    monkeypatch.setenv("CLI_TEST_OPENAI_KEY", KEY)
    monkeypatch.delenv("CLI_TEST_MISSING_KEY", raising=False)
    path = write_config(
        model_block("byok-a", "http://127.0.0.1:9/v1")
        + model_block("byok-b", "http://127.0.0.1:9/v1", key_env="CLI_TEST_MISSING_KEY", window=64000)
    )
    result = run_cli("models", "list", "--config", str(path))
    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[0].split() == ["ID", "PROVIDER", "MODEL", "CONTEXT", "KEY"]
    assert lines[1].split() == ["byok-a", "openai-chat", "gpt-fake", "128000", "yes"]
    assert lines[2].split() == ["byok-b", "openai-chat", "gpt-fake", "64000", "no"]
    assert KEY not in result.out + result.err


def test_models_list_without_models(run_cli, write_config):
    result = run_cli("models", "list", "--config", str(write_config()))
    assert result.code == 0 and "no models configured" in result.out


def test_models_test_streams_one_prompt_and_reports_speed(run_cli, write_config, monkeypatch, fake_openai):
    base_url, handler = fake_openai
    monkeypatch.setenv("CLI_TEST_OPENAI_KEY", KEY)
    path = write_config(model_block("byok-fast", base_url))
    result = run_cli("models", "test", "byok-fast", "--prompt", "ping?", "--config", str(path))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "Hello from the fake."
    match = re.fullmatch(r"ttft: (\d+) ms  total: (\d+) ms  output tokens: 5  tokens/s: ([\d.]+)", lines[1])
    assert match, lines[1]
    assert int(match.group(1)) <= int(match.group(2))
    assert float(match.group(3)) > 0
    [request] = handler.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["auth"] == f"Bearer {KEY}"
    assert request["body"]["model"] == "gpt-fake"
    assert request["body"]["stream"] is True
    assert request["body"]["messages"][-1]["content"] in ("ping?", [{"type": "text", "text": "ping?"}])
    assert KEY not in result.out + result.err


def test_models_test_reports_provider_errors_in_one_line(run_cli, write_config, monkeypatch, fake_openai):
    base_url, handler = fake_openai
    handler.status = 401
    monkeypatch.setenv("CLI_TEST_OPENAI_KEY", KEY)
    path = write_config(model_block("byok-fast", base_url))
    result = run_cli("models", "test", "byok-fast", "--config", str(path))
    assert result.code == 1
    [line] = result.err_lines
    assert line.startswith("cursor-byok: the provider rejected the API key for model byok-fast (HTTP 401): ")
    assert KEY not in result.out + result.err


def test_models_test_unknown_model_and_missing_key(run_cli, write_config, monkeypatch, fake_openai):
    base_url, _ = fake_openai
    monkeypatch.delenv("CLI_TEST_OPENAI_KEY", raising=False)
    path = write_config(model_block("byok-fast", base_url))
    result = run_cli("models", "test", "nope", "--config", str(path))
    assert result.code == 1 and result.err_lines == ["cursor-byok: unknown model 'nope' (configured: byok-fast)"]
    result = run_cli("models", "test", "byok-fast", "--config", str(path))
    assert result.code == 2 and "environment variable CLI_TEST_OPENAI_KEY is not set" in result.err
