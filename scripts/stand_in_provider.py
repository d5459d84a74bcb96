"""A stand-in model provider to try cursor-byok without an API key: an OpenAI-compatible Chat
Completions endpoint on loopback that streams one fixed sentence, quoting the last user message.

    python3 scripts/stand_in_provider.py --port 11500   # then base_url = "http://127.0.0.1:11500/v1"

Standard library only; it answers POST .../chat/completions (streamed or not) and GET .../models.
"""
from __future__ import annotations

import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # content parts
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content or "").strip()
    return ""


class StandIn(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps({"object": "list", "data": [{"id": "stand-in", "object": "model"}]}).encode()
        self._send(200, "application/json", body)

    def do_POST(self) -> None:  # noqa: N802
        request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        said = _last_user_text(request.get("messages", []))
        # cursor-byok wraps what the user typed in <user_query> after its own mode preamble
        said = said.rpartition("<user_query>")[2].partition("</user_query>")[0].strip() if "<user_query>" in said else said
        said = said[-200:]
        answer = f"Hello from the stand-in provider. You said: {said}"
        model = request.get("model", "stand-in")
        usage = {"prompt_tokens": 10, "completion_tokens": len(answer.split()), "total_tokens": 10 + len(answer.split())}
        if not request.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
            self._send(200, "application/json", json.dumps({"id": "chatcmpl-stand-in", "object": "chat.completion", "model": model, "choices": [choice], "usage": usage}).encode())
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        words = answer.split(" ")
        for i, word in enumerate(words):
            delta = {"content": word + (" " if i < len(words) - 1 else "")}
            self._event({"id": "chatcmpl-stand-in", "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                         "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        self._event({"id": "chatcmpl-stand-in", "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                     "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _event(self, payload: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        self.wfile.flush()

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        print(f"stand-in: {self.command} {self.path}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=11500, help="port to listen on (default: %(default)s)")
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), StandIn)
    print(f"stand-in provider: http://{args.host}:{args.port}/v1 (OpenAI Chat Completions)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
