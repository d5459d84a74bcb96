"""The crash loop's parts: a model that answers by what it is asked (any number of restarts and
retries), the turn kinds, where a kill lands, and what the database must say after each restart."""
from __future__ import annotations

import contextlib
import itertools
import json
import re
import sqlite3
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cursor_byok.conversation.history import EntryKind, decode_entry
from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.run import TextPart, ToolCallPart, ToolResultPart
from tests.fakes import OPENAI_CHAT, CallSpec, RecordedRequest, Reply
from tests.harness.ide import run_request

MODEL = "byok-loop"
TURN = re.compile(r"turn (\d+) (\w+)")
KINDS = ("text", "tools", "tools", "background")
# Where a kill lands, and the turn kind it needs (None: any).
PHASES = {
    "modeling": None, "background completion": "background", "tools": "tools", "result in flight": "tools",
    "one result acknowledged": "tools", "checkpointing": None, "anywhere": None,
}


class LoopModel:
    """The fake provider's responder: a turn `turn N tools` gets a Read and a Write (call ids never
    reused, so a repeated exec is a repeated side effect), their results get `answer N`, any other
    turn gets `answer N` after a few slow chunks (time to be killed while modeling)."""

    def __init__(self, chunk_delay: float = 0.03) -> None:
        self.chunk_delay = chunk_delay
        self.ids = itertools.count()

    def __call__(self, request: RecordedRequest) -> Reply:
        messages = request.json()["messages"]
        users = [m for m in messages if m["role"] == "user"]
        match = TURN.search(json.dumps(users[-1]["content"])) if users else None
        n, kind = (match.group(1), match.group(2)) if match else ("?", "text")
        if messages[-1]["role"] == "user" and kind == "tools":
            k = next(self.ids)
            return OPENAI_CHAT.tool_calls([
                CallSpec(f"c{n}_{k}_read", "Read", [json.dumps({"path": f"t{n}.txt"})]),
                CallSpec(f"c{n}_{k}_write", "Write", [json.dumps({"path": f"w{n}_{k}.txt", "contents": f"written {n}\n"})]),
            ])
        reply = OPENAI_CHAT.text(["thinking ", "it ", "over; ", f"answer {n}"])
        reply.chunk_delay = self.chunk_delay
        return reply


def turn_message(conv: str, n: int, kind: str) -> pb.AgentClientMessage:
    if kind != "background":
        return run_request(f"turn {n} {kind}", model=MODEL, conversation_id=conv, message_id=f"m{n}")
    msg = pb.AgentClientMessage()
    rr = msg.run_request
    rr.conversation_id = conv
    rr.run_id = uuid.uuid4().hex
    rr.requested_model.model_id = MODEL
    c = rr.action.background_task_completion_action.completions.add()
    c.task_id, c.tool_call_id, c.title, c.detail = f"task-{n}", f"call-{n}", f"turn {n} background", "Indexed 42 files."
    c.kind, c.status = pb.BACKGROUND_TASK_KIND_SUBAGENT, pb.BACKGROUND_TASK_STATUS_SUCCESS
    return msg


def input_key(msg: pb.AgentClientMessage) -> str:
    """The history event id a turn's input is stored under."""
    rr = msg.run_request
    if rr.action.HasField("user_message_action"):
        return f"user:{rr.action.user_message_action.user_message.message_id}"
    c = rr.action.background_task_completion_action.completions[0]
    return f"background-completed:SUBAGENT:{c.task_id}:{c.tool_call_id}"


@dataclass
class History:
    """A conversation's stored history, read from the database file as it is on disk."""

    keys: list[str] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)  # final text → how many times stored
    calls: list[str] = field(default_factory=list)
    results: dict[str, list[ToolResultPart]] = field(default_factory=dict)


def read_history(database: Path, conversation_id: str) -> tuple[History, str]:
    """The history and `PRAGMA integrity_check`'s verdict, from a read-only connection."""
    history = History()
    with contextlib.closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        verdict = "; ".join(str(row[0]) for row in conn.execute("PRAGMA integrity_check"))
        rows = conn.execute("SELECT event_id, payload FROM history_events WHERE conversation_id = ? ORDER BY seq", (conversation_id,))
        for event_id, payload in rows:
            entry = decode_entry(payload)
            history.keys.append(event_id)
            for part in entry.message.parts:
                if isinstance(part, ToolCallPart):
                    history.calls.append(part.id)
                elif isinstance(part, ToolResultPart):
                    history.results.setdefault(part.call_id, []).append(part)
                elif isinstance(part, TextPart) and entry.kind is EntryKind.ASSISTANT:
                    history.answers[part.text] += 1
    return history, verdict


def check_history(history: History, inputs: list[str], answered: list[str], acked_results: set[str]) -> None:
    """Nothing acknowledged lost, nothing duplicated: each acknowledged input stored once, each
    finished turn answered once, each tool call answered once, with the IDE's own result when
    the IDE's result had been acknowledged."""
    keys = Counter(history.keys)
    assert all(count == 1 for count in keys.values()), [k for k, c in keys.items() if c > 1]
    missing = [key for key in inputs if key not in keys]
    assert not missing, f"acknowledged input lost: {missing}"
    for n in answered:
        hits = sum(count for text, count in history.answers.items() if text.endswith(f"answer {n}"))
        assert hits == 1, f"turn {n} answered {hits} times"
    for call_id in history.calls:
        results = history.results.get(call_id, [])
        assert len(results) == 1, f"tool call {call_id} has {len(results)} results"
        if call_id in acked_results:
            assert not results[0].is_error, f"the IDE's acknowledged result for {call_id} was lost: {results[0].content!r}"
