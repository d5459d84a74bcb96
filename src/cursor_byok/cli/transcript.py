"""A stored conversation as a transcript a person can read: one line per user message, assistant
reply, tool call and result, and one per run with its outcome and tokens. Also the decoded form of
history payloads for `conversations export`."""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import msgspec


_WIDTH = 160


def decode_payload(payload: bytes) -> Any:
    """A history event's payload ({"kind", "message"}) as JSON-able data; undecodable bytes as text."""
    try:
        return msgspec.json.decode(payload)
    except msgspec.DecodeError:
        return payload.decode("utf-8", "replace")


def one_line(text: str, width: int = _WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _texts(parts: Iterable[Mapping[str, Any]], kind: str) -> str:
    return " ".join(p.get("text", "") for p in parts if p.get("type") == kind)


def message_lines(kind: str, message: Mapping[str, Any]) -> Iterator[str]:
    """The transcript lines of one history entry."""
    parts = message.get("parts") or []
    if kind == "request_context":
        yield f"context: {len(_texts(parts, 'text'))} chars of workspace context"
        return
    if kind == "compaction":
        yield f"compaction: {one_line(_texts(parts, 'text'))}"
        return
    if message.get("role") == "user":
        label = {"injection": "user (while running)", "background_completion": "background task"}.get(kind, "user")
        from ..prompting import user_query  # prompting pulls in the providers: only a transcript needs it

        yield f"{label}: {one_line(user_query(_texts(parts, 'text')))}"
        return
    for part in parts:
        kind_of = part.get("type")
        if kind_of == "text" and part.get("text", "").strip():
            yield f"assistant: {one_line(part['text'])}"
        elif kind_of == "thinking":
            yield f"thinking: {len(part.get('text', ''))} chars"
        elif kind_of == "tool_call":
            yield f"tool call {part.get('name')} {one_line(part.get('arguments', ''), 120)}"
        elif kind_of == "tool_result":
            failed = " (error)" if part.get("is_error") else ""
            yield f"tool result {part.get('name')}{failed}: {one_line(part.get('content', ''), 120)}"


def run_line(run: Any, usage: Any | None) -> str:
    """One run: its outcome (and error), how long it took, its tokens (when it spent any)."""
    outcome = getattr(run.outcome, "value", run.outcome) or "in progress"
    if run.error_code:
        outcome += f" ({run.error_code}: {one_line(run.error_message or '', 100)})"
    took = f", {(run.ended_at_ms - run.started_at_ms) / 1000:.1f} s" if run.ended_at_ms else ""
    spent = usage is not None and (usage.input_tokens or usage.output_tokens)
    tokens = f", tokens in {usage.input_tokens} out {usage.output_tokens}" if spent else ""
    return f"run {run.run_id}: {outcome}{took}{tokens}"


__all__ = ["decode_payload", "message_lines", "one_line", "run_line"]
