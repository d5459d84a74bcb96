"""A history read from the store is a few buffers (`StoredEntries`) and its projections are windows
over them and the entries appended since: read, sliced, keyed and compared like the lists of entry
objects they replace."""
from __future__ import annotations

import itertools
import sys
from types import FrameType
from typing import Any

from cursor_byok.config import ModelConfig, ProviderKind
from cursor_byok.conversation.history import ConversationHistory, EntryKind, HistoryEntry, StoredEntries, Window, encode_entry
from cursor_byok.conversation.history.log import Appended
from cursor_byok.http_client import streaming_client
from cursor_byok.providers import ModelRequest, make_provider
from cursor_byok.run import Message, TextPart


def stored(count: int) -> StoredEntries:
    kinds = [EntryKind.USER, EntryKind.REQUEST_CONTEXT, EntryKind.ASSISTANT, EntryKind.COMPACTION]
    return StoredEntries(
        (i + 1, f"stored-{i}-é", kinds[i % 4].value, f"run-{i // 3}" if i % 5 else None,
         encode_entry(kinds[i % 4], Message("user", [TextPart(f"stored {i}")])))
        for i in range(count)
    )


def added(count: int) -> list[HistoryEntry]:
    return [HistoryEntry(100 + i, f"added-{i}", EntryKind.USER, "r", Message("user", [TextPart(f"added {i}")])) for i in range(count)]


def ids(entries: list[HistoryEntry]) -> list[str]:
    return [e.event_id for e in entries]


def test_a_window_reads_slices_and_keys_like_the_list_of_its_entries() -> None:
    context = HistoryEntry(50, "context", EntryKind.REQUEST_CONTEXT, "r", Message("user", [TextPart("ctx")]))
    for n_stored, first, n_added, with_context in itertools.product((0, 5), (0, 2), (0, 3), (False, True)):
        log = stored(n_stored)
        window = Window(added(n_added), log, min(first, n_stored), context=context if with_context else None)
        plain = list(window)
        assert len(plain) == len(window) == with_context + max(n_stored - first, 0) + n_added
        assert [window.key(i) for i in range(len(window))] == ids(plain)
        for i in range(-len(plain), len(plain)):
            assert window[i].event_id == plain[i].event_id and window.kind(i) is plain[i].kind
            assert window.message(i) == plain[i].view() and window.canonical(i) == plain[i].canonical()
        for start, stop in itertools.product(range(-1, len(plain) + 2), repeat=2):
            assert ids(list(window[start:stop])) == ids(plain[start:stop]), (start, stop)


def test_windows_of_one_history_share_their_very_same_leading_entries() -> None:
    log, more = stored(6), Appended(added(3))
    whole = Window(more, log)
    assert whole.common(None) == 0
    assert whole.common(Window(more, log, added_stop=2)) == 8  # an appended entry later
    assert whole.common(Window(added(3), log)) == 6  # other appended entries
    assert whole.common(Window(more, log, 2)) == 0  # another start (a compaction)
    assert whole.common(Window(more, log, 6, added_first=1)) == 0  # another start among the appended entries
    assert whole.common(Window(more, stored(6))) == 0  # another history's stored entries
    assert whole.common(Window(more, log, 0, 4)) == 4
    more.append(added(4)[3])
    assert whole.common(Window(more, log)) == 9 and len(whole) == 9  # a window keeps its range as the history grows


def test_a_history_read_again_answers_as_the_one_that_wrote_it() -> None:
    history = ConversationHistory("c", strict_prefix=True)
    history.restore(stored(9))  # a compaction at 3 and 7, request contexts at 1 and 5
    assert len(history) == 9 and history.next_seq == 10
    assert history.has("stored-4-é") and not history.has("stored-4") and not history.has("-é")
    assert history.latest_context_text() == "stored 5"
    projection = history.project()
    assert ids(list(projection.entries)) == ["stored-5-é", "stored-7-é", "stored-8-é"]  # the kept context, then from the compaction on
    entry = history.append(EntryKind.USER, "user:1", Message("user", [TextPart("new")]), "r")
    assert entry is not None and entry.seq == 10 and history.append(EntryKind.USER, "stored-0-é", Message("user", []), "r") is None
    assert [m.parts[0].text for m in history.project()] == ["stored 5", "stored 7", "stored 8", "new"]  # type: ignore[union-attr]
    assert history.entries[-1] is entry and history.entries[2].run_id == "run-0" and history.entries[0].run_id == ""


def test_a_provider_splices_its_kept_messages_only_into_projections_that_start_with_them() -> None:
    """An adapter tells a projection that starts with the messages it kept from two keys (see
    `KeyedMessages`): over a history's projections (growing, compacted with its kept context, the
    in-flight round cut off, read again from the store) its bodies are those built from scratch."""
    client = streaming_client()
    model = ModelConfig(id="m", provider=ProviderKind.OPENAI_CHAT, model="x", base_url="http://127.0.0.1:9/v1")
    adapter = make_provider(model, "", client)

    def check(messages: object) -> None:
        request = ModelRequest(model="x", system="s", messages=messages)  # type: ignore[arg-type]
        fresh = ModelRequest(model="x", system="s", messages=list(messages))  # type: ignore[call-overload]
        assert adapter.encode_request(request) == make_provider(model, "", client).encode_request(fresh)

    history = ConversationHistory("c", strict_prefix=True)
    history.add_request_context("context A", "ctx-a", "r")
    for i in range(3):
        history.append(EntryKind.USER, f"u{i}", Message("user", [TextPart(f"question {i}")]), "r")
        check(history.project())
    check(history.project()[:-1])  # shorter: not served by the kept four
    check(history.project())
    history.compact("the summary", "compaction-1", "r")  # the projection restarts: the kept context, then the summary
    check(history.project())
    history.append(EntryKind.USER, "u3", Message("user", [TextPart("question 3")]), "r")
    check(history.project())
    history.add_request_context("context B", "ctx-b", "r")
    history.compact("another summary", "compaction-2", "r")
    check(history.project())
    reread = ConversationHistory("c")
    reread.restore(StoredEntries((e.seq, e.event_id, e.kind.value, e.run_id, encode_entry(e.kind, e.message)) for e in history.entries))
    check(reread.project())
    reread.append(EntryKind.USER, "u4", Message("user", [TextPart("question 4")]), "r")
    check(reread.project())


class Lines:
    """Lines of Python run while installed (`sys.settrace`)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        return self._line

    def _line(self, frame: FrameType, event: str, arg: Any) -> Any:
        self.count += int(event == "line")
        return self._line


def lookup_lines(stored_ids: list[str], wanted: list[str]) -> tuple[list[int | None], int]:
    """What a history read from these ids answers for each wanted id, and the lines that took."""
    entries = StoredEntries((i + 1, event_id, EntryKind.USER.value, "r", encode_entry(EntryKind.USER, Message("user", [TextPart("m")])))
                            for i, event_id in enumerate(stored_ids))
    counter = Lines()
    sys.settrace(counter)
    try:
        found = [entries.find(event_id) for event_id in wanted]
    finally:
        sys.settrace(None)
    return found, counter.count


def test_an_idempotency_lookup_does_not_walk_the_stored_ids() -> None:
    """Whether an event id is stored (4 lookups a turn, most of them for ids that are not) is told
    from a lookup table, not a scan of every stored id. A scan's cost shows as lines where stored ids
    hold the wanted one (a user message's id is the client's: any text): it must go on past each."""
    lines = {}
    for count in (10, 2_000):
        inside = [f"{i}\x06\x00\x00\x00user:1" for i in range(count)]  # "user:1" and its length, as a scan would see it
        stored_ids = [*inside, "user:1", "user:10", *(f"user:1{i}0" for i in range(count))]
        wanted = ["user:1", "user:10", "user:2", inside[-1], "", "user:"]
        found, lines[count] = lookup_lines(stored_ids, wanted)
        assert found == [count, count + 1, None, count - 1, None, None]
    # A few lines a lookup whatever the count (a probe or two of the table, how many depends on the
    # process's hash seed), where walking the ids ran ~8,000 at 4,002 ids.
    assert max(lines.values()) <= 150, lines
