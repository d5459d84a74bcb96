"""A user text that went into the store's JSON is spliced from there into the provider request
rather than escaped again: what a projection hands out is byte for byte what msgspec writes for the
same text, and it hands out nothing it did not encode itself this run."""
from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.conversation.history import ConversationHistory, EntryKind, StoredEntries, encode_entry
from cursor_byok.run import ImagePart, Message, TextPart

# Escapes, non-ASCII, U+2028/2029, characters msgspec writes as \u00XX, astral characters.
TRICKY = ['plain', 'quote " and back\\slash', "tab\tnew\nline\r", "\x00\x01\x1f\x7f", "é ü 漢字 😀",
          "\u2028 and \u2029", "</script>", "x" * 12_000]


def projected(text: str, *, stored_first: bool) -> ConversationHistory:
    history = ConversationHistory("c", strict_prefix=False)
    entry = history.append(EntryKind.USER, "u1", Message("user", [TextPart(text)]), "r1")
    assert entry is not None
    if stored_first:
        entry.stored_bytes()  # what persistence does before the model is called
    return history


def spliced(history: ConversationHistory) -> bytes | None:
    raw = history.project().with_text(0)[1]
    return None if raw is None else bytes(msgspec.json.encode(raw))


def test_the_spliced_text_is_what_msgspec_writes_for_it() -> None:
    for text in TRICKY:
        assert spliced(projected(text, stored_first=True)) == msgspec.json.encode(text), text


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_splices_as_msgspec_writes_it(text: str) -> None:
    assert spliced(projected(text, stored_first=True)) == msgspec.json.encode(text)


def test_nothing_is_spliced_that_was_not_encoded_here() -> None:
    assert spliced(projected("not stored yet", stored_first=False)) is None
    # Read from the store: its bytes may come from another version's encoder.
    history = ConversationHistory("c", strict_prefix=False)
    history.restore(StoredEntries([(1, "u1", "user", "r1", encode_entry(EntryKind.USER, Message("user", [TextPart("old")])))]))
    assert history.entries[0].message.parts[0] == TextPart("old")  # decoded: it holds both
    assert spliced(history) is None


def test_only_a_lone_user_text_is_spliced() -> None:
    history = ConversationHistory("c", strict_prefix=False)
    for i, message in enumerate([Message("user", [TextPart("a"), TextPart("b")]),
                                 Message("user", [TextPart("see"), ImagePart("image/png", "iVBORw0KGgo=")]),
                                 Message("assistant", [TextPart("answer")])]):
        entry = history.append(EntryKind.USER if i < 2 else EntryKind.ASSISTANT, f"e{i}", message, "r1")
        assert entry is not None
        entry.stored_bytes()
    projection = history.project()
    assert [projection.with_text(i)[1] for i in range(3)] == [None, None, None]


def test_a_lone_surrogate_is_never_stored_so_never_spliced() -> None:
    entry = projected("a\ud800b", stored_first=False).entries[0]
    with pytest.raises(UnicodeEncodeError):  # msgspec refuses it for the store as for a request
        entry.stored_bytes()
    assert entry.text_json() is None
