"""A synthetic history (for the scale benchmark and its small-scale tests), written straight into the store's tables.

    python -m tests.harness.synthetic_history PATH [CONVERSATIONS TURNS EVENTS_PER_TURN [FIRST_INDEX]]

The schema is whatever the running `cursor_byok` creates (`Store.open` applies its migrations, so
the benchmark's `BENCH_SRC` decides it); the rows are then bulk-inserted with plain SQL in primary-key
order, with the two gap-free triggers dropped meanwhile and put back unchanged. Each conversation is
`TURNS` turns of `EVENTS_PER_TURN` history events (a user message, assistant messages calling a tool
and its results, a closing answer), each turn with its request binding, its run, its usage row and
its final checkpoint, as the server writes them. Payloads are real encoded history entries, so a
conversation continued later loads and projects like one the server wrote.
"""
from __future__ import annotations

import asyncio
import hashlib
import random
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from cursor_byok.conversation.history import EntryKind, encode_entry
from cursor_byok.protocol import agent_pb2 as pb
from cursor_byok.run import Message, TextPart, ToolCallPart, ToolResultPart
from cursor_byok.store import Store

YEAR_MS = 365 * 86_400_000
MODEL = "bench"
_GAP_FREE_TRIGGERS = ("history_events_gap_free", "checkpoints_gap_free")
_WORDS = ("the", "file", "change", "test", "function", "returns", "value", "error", "config", "module",
          "request", "server", "history", "turn", "provider", "stream", "binding", "index", "query", "page")


def hex_id(kind: str, *parts: int) -> str:
    """A stable, evenly spread 32-hex id (like the uuid4().hex ids Cursor and the server use)."""
    return hashlib.blake2b(f"{kind}:{':'.join(map(str, parts))}".encode(), digest_size=16).hexdigest()


def conversation_id(index: int) -> str:
    return hex_id("conversation", index)


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


class Payloads:
    """A few hundred distinct encoded entries of each kind, reused across conversations (building ten
    million distinct texts would only slow the build down)."""

    def __init__(self, variants: int = 200) -> None:
        rng = random.Random(18)
        self.user = [encode_entry(EntryKind.USER, Message("user", [TextPart(_text(rng, 16))])) for _ in range(variants)]
        self.call = [
            encode_entry(EntryKind.ASSISTANT, Message("assistant", [
                TextPart(_text(rng, 6)),
                ToolCallPart(f"call_{i}", "read_file", '{"path":"src/%s.py"}' % rng.choice(_WORDS)),
            ]))
            for i in range(variants)
        ]
        self.result = [
            encode_entry(EntryKind.TOOL_RESULTS, Message("tool", [ToolResultPart(f"call_{i}", "read_file", _text(rng, 24))]))
            for i in range(variants)
        ]
        self.answer = [encode_entry(EntryKind.ASSISTANT, Message("assistant", [TextPart(_text(rng, 20))])) for _ in range(variants)]

    def turn(self, n: int, events: int) -> Iterator[tuple[str, bytes]]:
        """(kind, payload) of one turn's events: user, then assistant+tool pairs, then the answer."""
        v = len(self.user)
        yield EntryKind.USER.value, self.user[n % v]
        pairs = (events - 2) // 2
        for p in range(pairs):
            call = (n + p) % v
            yield EntryKind.ASSISTANT.value, self.call[call]
            yield EntryKind.TOOL_RESULTS.value, self.result[call]
        for _ in range(events - 2 - 2 * pairs):
            yield EntryKind.ASSISTANT.value, self.answer[(n + 1) % v]
        yield EntryKind.ASSISTANT.value, self.answer[n % v]


def checkpoint_state(messages: int) -> bytes:
    """A final checkpoint as the server writes it: one root-prompt blob id per message so far."""
    state = pb.ConversationStateStructure()
    state.root_prompt_messages_json.extend(hashlib.sha256(b"%d" % i).digest() for i in range(messages))
    return state.SerializeToString()


def _create_schema(path: Path) -> int:
    async def create() -> int:
        store = await Store.open(path)
        version = store.schema_version
        await store.close()
        return version

    return asyncio.run(create())


def build(path: Path, conversations: int, turns: int, events_per_turn: int, *, seed_from: int = 0) -> dict[str, int]:
    """Create the database at `path` (which must not exist) and fill it; returns the row counts.
    Conversations `seed_from .. seed_from + conversations - 1` are written (the same ids, rows and
    payloads for an index whichever database holds it)."""
    if path.exists():
        raise FileExistsError(path)
    _create_schema(path)
    payloads = Payloads()
    now = int(time.time() * 1000)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -1048576")  # 1 GiB while building
    triggers = dict(conn.execute(
        f"SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name IN {_GAP_FREE_TRIGGERS}").fetchall())
    counts = {"conversations": 0, "request_bindings": 0, "runs": 0, "history_events": 0, "checkpoints": 0, "usage": 0}
    conn.execute("BEGIN")
    for name in triggers:
        conn.execute(f"DROP TRIGGER {name}")
    indexes = range(seed_from, seed_from + conversations)
    for chunk_start in range(0, conversations, 5_000):
        chunk = sorted(indexes[chunk_start:chunk_start + 5_000], key=conversation_id)
        _write_chunk(conn, chunk, turns, events_per_turn, payloads, now, counts)
    for sql in triggers.values():
        conn.execute(sql)
    conn.execute("COMMIT")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    return counts


def _write_chunk(conn: sqlite3.Connection, chunk: list[int], turns: int, events_per_turn: int, payloads: Payloads,
                 now: int, counts: dict[str, int]) -> None:
    conversations, bindings, runs, events, checkpoints, usage = [], [], [], [], [], []
    for index in chunk:
        cid = conversation_id(index)
        rng = random.Random(index)
        created = now - YEAR_MS + rng.randrange(YEAR_MS - 86_400_000)
        at = created
        seq = 0
        for turn in range(turns):
            at += rng.randrange(60_000, 3_600_000)
            request_id, run_id, cursor_run = hex_id("request", index, turn), hex_id("run", index, turn), hex_id("cursor-run", index, turn)
            bindings.append((request_id, cid, cursor_run, at))
            runs.append((run_id, cid, cursor_run, request_id, "finalizing", "succeeded", at, at + 8_000))
            for kind, payload in payloads.turn(index + turn, events_per_turn):
                seq += 1
                events.append((cid, seq, hex_id("event", index, seq), kind, run_id, payload, at))
            checkpoints.append((cid, turn + 1, seq, run_id, "final", checkpoint_state(seq), at + 8_000))
            usage.append((run_id, cid, MODEL, "openai-chat", 3_000 + 400 * turn, 300, 0, 0, 0, 900, 8_000, at + 8_000))
        conversations.append((cid, MODEL, "agent", created, at, cursor_run, None))
    conn.executemany(
        "INSERT INTO conversations (conversation_id, model_id, mode, created_at_ms, updated_at_ms, last_cursor_run_id, title) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)", conversations)
    conn.executemany("INSERT INTO request_bindings (request_id, conversation_id, cursor_run_id, created_at_ms) VALUES (?, ?, ?, ?)",
                     sorted(bindings))
    conn.executemany(
        "INSERT INTO runs (run_id, conversation_id, cursor_run_id, request_id, phase, outcome, started_at_ms, ended_at_ms) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", sorted(runs))
    conn.executemany(
        "INSERT INTO history_events (conversation_id, seq, event_id, kind, run_id, payload, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
        events)
    conn.executemany(
        "INSERT INTO checkpoints (conversation_id, seq, through_event_seq, run_id, kind, state, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
        checkpoints)
    conn.executemany(
        "INSERT INTO usage (run_id, conversation_id, model_id, provider, input_tokens, output_tokens, cache_read_tokens, "
        "cache_write_tokens, reasoning_tokens, ttft_ms, duration_ms, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        usage)
    for table, rows in (("conversations", conversations), ("request_bindings", bindings), ("runs", runs),
                        ("history_events", events), ("checkpoints", checkpoints), ("usage", usage)):
        counts[table] += len(rows)


if __name__ == "__main__":
    target = Path(sys.argv[1])
    numbers = [int(a) for a in sys.argv[2:5]] or [100_000, 10, 10]
    first = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    started = time.monotonic()
    print(build(target, *numbers, seed_from=first), f"{time.monotonic() - started:.1f} s")
