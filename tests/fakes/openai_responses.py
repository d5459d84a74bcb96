"""OpenAI Responses streams (typed events with sequence numbers, reasoning items, function calls)."""
from __future__ import annotations

from typing import Any

from cursor_byok.config import ProviderKind
from cursor_byok.providers import Usage

from .dialect import CallSpec, UsageSpec, sse
from .openai_chat import _error
from .server import Reply

ENCRYPTED = "gAAAAABfake-encrypted-reasoning=="


class _Seq:
    def __init__(self) -> None:
        self.n = 0

    def ev(self, data: dict[str, Any]) -> bytes:
        data = {"type": data["type"], "sequence_number": self.n, **{k: v for k, v in data.items() if k != "type"}}
        self.n += 1
        return sse(data, event=data["type"])


def _response(status: str, output: list[Any], usage: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    return {"id": "resp_fake1", "object": "response", "created_at": 1_700_000_000, "status": status,
            "model": "fake-model", "output": output, "parallel_tool_calls": True, "store": False,
            "usage": usage, "error": None, "incomplete_details": None, **extra}


class OpenAIResponsesDialect:
    kind = ProviderKind.OPENAI_RESPONSES
    messages_key = "input"

    def _wrap(self, seq: _Seq, body: list[bytes], output: list[Any], usage: UsageSpec,
              final: str = "response.completed", **extra: Any) -> Reply:
        head = [seq.ev({"type": "response.created", "response": _response("in_progress", [], None)}),
                seq.ev({"type": "response.in_progress", "response": _response("in_progress", [], None)})]
        u = {"input_tokens": usage.input + usage.cache_read,
             "input_tokens_details": {"cached_tokens": usage.cache_read},
             "output_tokens": usage.output, "output_tokens_details": {"reasoning_tokens": usage.reasoning},
             "total_tokens": usage.input + usage.cache_read + usage.output}
        status = "completed" if final == "response.completed" else "incomplete"
        tail = [seq.ev({"type": final, "response": _response(status, output, u, **extra)})]
        return Reply(chunks=[*head, *body, *tail])

    @staticmethod
    def _message(seq: _Seq, index: int, pieces: list[str], item_id: str = "msg_fake1") -> tuple[list[bytes], Any]:
        text = "".join(pieces)
        done_item = {"id": item_id, "type": "message", "status": "completed", "role": "assistant",
                     "content": [{"type": "output_text", "annotations": [], "text": text}]}
        events = [
            seq.ev({"type": "response.output_item.added", "output_index": index,
                    "item": {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant",
                             "content": []}}),
            seq.ev({"type": "response.content_part.added", "item_id": item_id, "output_index": index,
                    "content_index": 0, "part": {"type": "output_text", "annotations": [], "text": ""}}),
            *[seq.ev({"type": "response.output_text.delta", "item_id": item_id, "output_index": index,
                      "content_index": 0, "delta": p, "logprobs": []}) for p in pieces],
            seq.ev({"type": "response.output_text.done", "item_id": item_id, "output_index": index,
                    "content_index": 0, "text": text, "logprobs": []}),
            seq.ev({"type": "response.content_part.done", "item_id": item_id, "output_index": index,
                    "content_index": 0, "part": {"type": "output_text", "annotations": [], "text": text}}),
            seq.ev({"type": "response.output_item.done", "output_index": index, "item": done_item}),
        ]
        return events, done_item

    def text(self, pieces: list[str], usage: UsageSpec = UsageSpec()) -> Reply:
        seq = _Seq()
        events, item = self._message(seq, 0, pieces)
        return self._wrap(seq, events, [item], usage)

    def thinking(self, thoughts: list[str], pieces: list[str], usage: UsageSpec = UsageSpec()) -> Reply:
        seq = _Seq()
        summary = [{"type": "summary_text", "text": "".join(thoughts)}]
        reasoning_done = {"id": "rs_fake1", "type": "reasoning", "summary": summary, "encrypted_content": ENCRYPTED}
        events = [
            seq.ev({"type": "response.output_item.added", "output_index": 0,
                    "item": {"id": "rs_fake1", "type": "reasoning", "summary": []}}),
            seq.ev({"type": "response.reasoning_summary_part.added", "item_id": "rs_fake1", "output_index": 0,
                    "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
            *[seq.ev({"type": "response.reasoning_summary_text.delta", "item_id": "rs_fake1", "output_index": 0,
                      "summary_index": 0, "delta": t}) for t in thoughts],
            seq.ev({"type": "response.reasoning_summary_text.done", "item_id": "rs_fake1", "output_index": 0,
                    "summary_index": 0, "text": "".join(thoughts)}),
            seq.ev({"type": "response.reasoning_summary_part.done", "item_id": "rs_fake1", "output_index": 0,
                    "summary_index": 0, "part": summary[0]}),
            seq.ev({"type": "response.output_item.done", "output_index": 0, "item": reasoning_done}),
        ]
        message, item = self._message(seq, 1, pieces)
        return self._wrap(seq, events + message, [reasoning_done, item], usage)

    def tool_calls(self, calls: list[CallSpec], pieces: list[str] = [], usage: UsageSpec = UsageSpec()) -> Reply:
        seq = _Seq()
        events: list[bytes] = []
        output: list[Any] = []
        index = 0
        if pieces:
            message, item = self._message(seq, 0, pieces)
            events += message
            output.append(item)
            index = 1
        for call in calls:
            fc_id = f"fc_{call.id}"
            args = "".join(call.arg_pieces)
            done = {"id": fc_id, "type": "function_call", "status": "completed", "arguments": args,
                    "call_id": call.id, "name": call.name}
            events.append(seq.ev({"type": "response.output_item.added", "output_index": index,
                                  "item": {**done, "status": "in_progress", "arguments": ""}}))
            events += [seq.ev({"type": "response.function_call_arguments.delta", "item_id": fc_id,
                               "output_index": index, "delta": p}) for p in call.arg_pieces]
            events.append(seq.ev({"type": "response.function_call_arguments.done", "item_id": fc_id,
                                  "output_index": index, "arguments": args}))
            events.append(seq.ev({"type": "response.output_item.done", "output_index": index, "item": done}))
            output.append(done)
            index += 1
        return self._wrap(seq, events, output, usage)

    def expected_usage(self, usage: UsageSpec) -> Usage:
        return Usage(input_tokens=usage.input + usage.cache_read, output_tokens=usage.output,
                     cache_read_tokens=usage.cache_read, cache_write_tokens=None, reasoning_tokens=usage.reasoning)

    def auth_error(self, echo: str = "") -> Reply:
        return _error(401, f"Incorrect API key provided: {echo}.", "invalid_request_error", "invalid_api_key")

    def rate_limited(self, headers: dict[str, str]) -> Reply:
        return _error(429, "Rate limit reached for requests.", "requests", "rate_limit_exceeded", headers)

    def overloaded(self) -> Reply:
        return _error(503, "The server is overloaded or not ready yet.", "server_error", None)

    def context_length(self) -> Reply:
        return _error(400, "Your input exceeds the context window of this model. Please adjust your input and "
                      "try again.", "invalid_request_error", "context_length_exceeded")

    def refusal(self) -> Reply:
        seq = _Seq()
        text = "I'm sorry, I can't help with that."
        item = {"id": "msg_fake1", "type": "message", "status": "completed", "role": "assistant",
                "content": [{"type": "refusal", "refusal": text}]}
        events = [
            seq.ev({"type": "response.output_item.added", "output_index": 0,
                    "item": {**item, "status": "in_progress", "content": []}}),
            seq.ev({"type": "response.content_part.added", "item_id": "msg_fake1", "output_index": 0,
                    "content_index": 0, "part": {"type": "refusal", "refusal": ""}}),
            seq.ev({"type": "response.refusal.delta", "item_id": "msg_fake1", "output_index": 0,
                    "content_index": 0, "delta": text}),
            seq.ev({"type": "response.refusal.done", "item_id": "msg_fake1", "output_index": 0,
                    "content_index": 0, "refusal": text}),
            seq.ev({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ]
        return self._wrap(seq, events, [item], UsageSpec())

    def overloaded_in_stream(self) -> Reply:
        seq = _Seq()
        return Reply(chunks=[
            seq.ev({"type": "response.created", "response": _response("in_progress", [], None)}),
            seq.ev({"type": "response.failed", "response": _response(
                "failed", [], None, error={"code": "server_is_overloaded", "message": "The server is overloaded."})}),
        ])
