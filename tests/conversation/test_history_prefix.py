"""The prefix check of a conversation's projections: raised before the request when strict (tests);
otherwise logged once the request built from the projection has left (the loop's next pass), in
order with the projections before and after it."""
from __future__ import annotations

import asyncio
import logging

import pytest

from cursor_byok.conversation.history import ConversationHistory, EntryKind, HistoryEntry
from cursor_byok.conversation.history.log import Appended, PrefixViolation
from cursor_byok.run import Message, TextPart

VIOLATION = "provider history is not an extension of the previous one"


def user(text: str) -> Message:
    return Message("user", [TextPart(text)])


def rewritten(strict: bool) -> ConversationHistory:
    """A history whose projection no longer starts with what it was after it was projected (what
    the check is there for): its first entry rewritten, as a bug that rebuilt the history might."""
    history = ConversationHistory("c1", strict_prefix=strict)
    history.append(EntryKind.USER, "user:1", user("first"), "r1")
    history.project()
    first = history.entries[0]
    history._added = Appended([HistoryEntry(first.seq, first.event_id, first.kind, first.run_id, user("first, edited"))])
    history.append(EntryKind.USER, "user:2", user("second"), "r2")
    return history


def violations(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == VIOLATION]


def test_strict_checking_raises_before_the_projection_is_used() -> None:
    with pytest.raises(PrefixViolation):
        rewritten(strict=True).project()


async def test_a_violation_is_logged_once_the_loop_runs_on(caplog: pytest.LogCaptureFixture) -> None:
    history = rewritten(strict=False)
    with caplog.at_level(logging.ERROR):
        messages = history.project()
        assert [m.parts[0].text for m in messages] == ["first, edited", "second"]  # type: ignore[union-attr]
        assert violations(caplog) == []  # not in front of the request
        await asyncio.sleep(0)
        assert len(violations(caplog)) == 1


async def test_projections_are_checked_in_order_even_before_the_loop_runs_on(caplog: pytest.LogCaptureFixture) -> None:
    history = rewritten(strict=False)
    with caplog.at_level(logging.ERROR):
        history.project()
        history.append(EntryKind.USER, "user:3", user("third"), "r3")
        history.project()  # checks the one before first, then waits with its own
        assert len(violations(caplog)) == 1
        await asyncio.sleep(0)
        assert len(violations(caplog)) == 1  # the third extends the second: fine


async def test_a_compaction_resets_the_chain_after_the_pending_check(caplog: pytest.LogCaptureFixture) -> None:
    history = rewritten(strict=False)
    with caplog.at_level(logging.ERROR):
        history.project()
        history.compact("summary", "compaction:1", "r2")  # the pending check runs before the reset
        assert len(violations(caplog)) == 1
        history.project()
        await asyncio.sleep(0)
        assert len(violations(caplog)) == 1  # after the reset, nothing to compare with


def test_without_a_loop_the_check_runs_at_once(caplog: pytest.LogCaptureFixture) -> None:
    history = rewritten(strict=False)
    with caplog.at_level(logging.ERROR):
        history.project()
    assert len(violations(caplog)) == 1


class CountingEncoder:
    """The history's JSON encoder, counting what it encodes."""

    def __init__(self, encoder: object) -> None:
        self.encoder, self.encoded = encoder, 0

    def encode(self, value: object) -> bytes:
        self.encoded += 1
        return self.encoder.encode(value)  # type: ignore[attr-defined]


def test_an_entry_is_encoded_once_for_the_store_and_the_prefix_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the store keeps of an entry embeds its canonical bytes: the prefix check reads them
    there, rather than encoding the message (a whole user turn, often tens of KiB) again."""
    from cursor_byok.conversation import persistence
    from cursor_byok.conversation.history import entry as entry_module

    counting = CountingEncoder(entry_module._encoder)
    monkeypatch.setattr(entry_module, "_encoder", counting)
    history = ConversationHistory("c1", strict_prefix=True)
    appended = history.append(EntryKind.USER, "user:1", user("a question " * 1000), "r1")
    assert appended is not None
    stored = persistence._event(appended)  # what the store is handed
    history.project()  # the check: its digest read from the stored bytes
    assert counting.encoded == 1
    assert stored.payload.endswith(counting.encoder.encode(appended.message) + b"}")  # type: ignore[attr-defined]
    history.append(EntryKind.USER, "user:2", user("next"), "r2")
    history.project()  # the chain goes on from the first: only the second entry (not stored here) is encoded
    assert counting.encoded == 2
