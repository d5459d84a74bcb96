"""Request bodies built from stored fragments are byte-identical to ones built from scratch, over a
growing history, for every provider family; a message's stored bytes go when the message goes, and
what all stored messages hold stays within a byte budget however many histories are in memory."""
from __future__ import annotations

import gc
import tracemalloc

import msgspec
import pytest

from cursor_byok.config import ModelConfig, ProviderKind
from cursor_byok.http_client import streaming_client
from cursor_byok.providers.fragments import MESSAGE_BYTES
from cursor_byok.providers import (
    ImagePart,
    KeyedMessages,
    Message,
    ModelRequest,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    ToolSchema,
    make_provider,
)

OFFLINE = streaming_client()
TOOLS = [ToolSchema("Read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}}),
         ToolSchema("Shell", "Run a command.", {"type": "object", "properties": {"command": {"type": "string"}}})]
IMAGE = ImagePart("image/png", "iVBORw0KGgo=")


def turn(i: int) -> list[Message]:
    return [
        Message("user", [TextPart(f"question {i} " * 50)]),
        Message("assistant", [ThinkingPart("hmm", {"anthropic": {"signature": "sig"}, "openai_chat": {"field": "reasoning"}}),
                              TextPart(f"answer {i}"), ToolCallPart(f"call-{i}", "Read", '{"path": "a"}')]),
        Message("tool", [ToolResultPart(f"call-{i}", "Read", "contents", images=[IMAGE] if i % 2 else [])]),
    ]


@pytest.mark.parametrize("kind", list(ProviderKind))
def test_bodies_from_stored_fragments_equal_fresh_ones(kind: ProviderKind) -> None:
    model = ModelConfig(id="m", provider=kind, model="x", base_url="http://127.0.0.1:9/v1")
    reused = make_provider(model, "", OFFLINE)
    history: list[Message] = []
    for i in range(6):
        history = history + turn(i)  # a new list each turn, the same message objects
        system = "You are terse." if i < 3 else "You are verbose."  # a new system prompt midway
        request = ModelRequest(model="x", system=system, messages=history, tools=TOOLS[: 1 + i % 2], max_tokens=100)
        assert reused.encode_request(request) == make_provider(model, "", OFFLINE).encode_request(request)


def test_a_message_s_stored_bytes_go_with_the_message() -> None:
    model = ModelConfig(id="m", provider=ProviderKind.OPENAI_CHAT, model="x", base_url="http://127.0.0.1:9/v1")
    provider = make_provider(model, "", OFFLINE)
    history = turn(0) + turn(1)
    provider.encode_request(ModelRequest(model="x", system="s", messages=history))
    assert len(provider._fragments._messages) == len(history)
    del history
    gc.collect()
    assert provider._fragments._messages == {}


def test_the_stored_messages_stay_within_their_byte_budget() -> None:
    """Histories in memory (idle conversations) do not keep their request JSON beyond the budget;
    the most recently sent stay, and a request whose messages were let go is the same request."""
    model = ModelConfig(id="m", provider=ProviderKind.OPENAI_CHAT, model="x", base_url="http://127.0.0.1:9/v1")
    provider = make_provider(model, "", OFFLINE)
    histories = [[Message("user", [TextPart(f"conversation {n}: " + "lorem ipsum " * 10_000)])] for n in range(100)]
    sent = sum(len(h[0].parts[0].text) for h in histories)  # type: ignore[union-attr]
    assert sent > 10 * 2**20
    tracemalloc.start()
    try:
        for history in histories:
            provider.encode_request(ModelRequest(model="x", system="s", messages=history))
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept <= MESSAGE_BYTES + 2**20 < sent  # what the adapter kept of the 12 MB it sent
    assert 0 < provider._fragments.stored_bytes <= MESSAGE_BYTES
    for history in (histories[0], histories[-1]):  # let go of long ago / just sent
        request = ModelRequest(model="x", system="s", messages=history)
        assert provider.encode_request(request) == make_provider(model, "", OFFLINE).encode_request(request)


class Short(KeyedMessages):
    """Keyed messages of a few bytes each (a long conversation of one-word turns)."""

    def __init__(self, start: int, count: int) -> None:
        self.start, self.count = start, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):  # type: ignore[no-untyped-def, override]
        return Message("user", [TextPart("ok")])

    def source(self) -> str:
        return f"conversation {self.start}"

    def key(self, index: int) -> str:
        return f"event-{self.start + index:032x}"


def test_the_budget_counts_what_each_kept_message_costs_not_only_its_bytes() -> None:
    """Thousands of short messages: what the adapter keeps for each (its key, its entry) is most of
    what it holds, and the budget bounds that too."""
    model = ModelConfig(id="m", provider=ProviderKind.OPENAI_CHAT, model="x", base_url="http://127.0.0.1:9/v1")
    provider = make_provider(model, "", OFFLINE)
    tracemalloc.start()
    try:
        for batch in range(100):
            provider.encode_request(ModelRequest(model="x", system="s", messages=Short(batch * 1_000, 1_000)))
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept <= MESSAGE_BYTES + 2**20


class Reread(KeyedMessages):
    """A history read again (new message objects each read), keyed by position; counts its reads."""

    def __init__(self, messages: list[Message]) -> None:
        self.encoded = [msgspec.json.encode(m) for m in messages]
        self.reads = 0

    def __len__(self) -> int:
        return len(self.encoded)

    def __getitem__(self, index):  # type: ignore[no-untyped-def, override]
        self.reads += 1
        return msgspec.json.decode(self.encoded[index], type=Message)

    def source(self) -> str:
        return "conversation"

    def key(self, index: int) -> str:
        return str(index)


@pytest.mark.parametrize("kind", list(ProviderKind))
def test_keyed_messages_are_read_only_when_their_bytes_are_not_kept(kind: ProviderKind) -> None:
    """A conversation whose runtime was let go reads its history again as new objects: keyed, the
    adapter splices the bytes it kept and reads (decodes) only the messages it has not seen."""
    model = ModelConfig(id="m", provider=kind, model="x", base_url="http://127.0.0.1:9/v1")
    adapter = make_provider(model, "", OFFLINE)
    plain = turn(0) + turn(1)
    first = Reread(plain[:3])
    adapter.encode_request(ModelRequest(model="x", system="s", messages=first))
    assert first.reads == 3
    again = Reread(plain)
    body = adapter.encode_request(ModelRequest(model="x", system="s", messages=again))
    assert again.reads == 3  # only the three new ones
    assert body == make_provider(model, "", OFFLINE).encode_request(ModelRequest(model="x", system="s", messages=plain))


class Renamed(Reread):
    """The same messages under other keys from `start` on (a compaction's projection restarts)."""

    def __init__(self, messages: list[Message], start: int) -> None:
        super().__init__(messages)
        self.start = start

    def key(self, index: int) -> str:
        return str(index) if index < self.start else f"other {index}"


@pytest.mark.parametrize("kind", list(ProviderKind))
def test_a_kept_prefix_serves_only_messages_whose_keys_start_with_its_own(kind: ProviderKind) -> None:
    model = ModelConfig(id="m", provider=kind, model="x", base_url="http://127.0.0.1:9/v1")
    adapter = make_provider(model, "", OFFLINE)
    plain = turn(0) + turn(1)
    adapter.encode_request(ModelRequest(model="x", system="s", messages=Reread(plain[:4])))
    other = [Message("user", [TextPart("another first message")]), *plain[1:]]
    changed = Renamed(other, 2)  # the third message has another key: the kept four are not its first four
    body = adapter.encode_request(ModelRequest(model="x", system="s", messages=changed))
    assert changed.reads == len(other)
    assert body == make_provider(model, "", OFFLINE).encode_request(ModelRequest(model="x", system="s", messages=other))
    shorter = Reread(plain[:2])  # its keys are a prefix of the kept ones, not the other way round
    body = adapter.encode_request(ModelRequest(model="x", system="s", messages=shorter))
    assert shorter.reads == 2
    assert body == make_provider(model, "", OFFLINE).encode_request(ModelRequest(model="x", system="s", messages=plain[:2]))


class Counted(Reread):
    """Counts the keys read (each key, or every key at once by `keys()`)."""

    def __init__(self, messages: list[Message]) -> None:
        super().__init__(messages)
        self.keys_read = 0

    def key(self, index: int) -> str:
        self.keys_read += 1
        return super().key(index)


@pytest.mark.parametrize("kind", list(ProviderKind))
def test_a_follow_up_request_reads_as_many_keys_at_1_000_messages_as_at_10(kind: ProviderKind) -> None:
    """Whether the kept prefix is a request's first messages is told from a few keys (the
    messages' first and the kept last one's), not from every key of the history each request."""
    model = ModelConfig(id="m", provider=kind, model="x", base_url="http://127.0.0.1:9/v1")
    read = {}
    for length in (10, 1_000):
        adapter = make_provider(model, "", OFFLINE)
        plain = [Message("user", [TextPart(f"message {i}")]) for i in range(length + 2)]
        adapter.encode_request(ModelRequest(model="x", system="s", messages=Counted(plain[:length])))
        follow_up = Counted(plain)
        body = adapter.encode_request(ModelRequest(model="x", system="s", messages=follow_up))
        assert follow_up.reads == 2  # the kept prefix served the rest
        assert body == make_provider(model, "", OFFLINE).encode_request(ModelRequest(model="x", system="s", messages=plain))
        read[length] = follow_up.keys_read
    assert read[1_000] == read[10] <= 4, read


@pytest.mark.parametrize("kind", list(ProviderKind))
def test_a_follow_up_request_copies_its_history_s_bytes_once(kind: ProviderKind) -> None:
    """The kept prefix and the new messages go into the request's bytes in one copy: a long
    history's request body is not first joined as its messages' array and then copied again into
    the body around it (each copy a fresh buffer of the history's size, the kernel's pages to fill)."""
    model = ModelConfig(id="m", provider=kind, model="x", base_url="http://127.0.0.1:9/v1")
    adapter = make_provider(model, "", OFFLINE)
    plain = [Message("user" if i % 2 else "assistant", [TextPart(f"message {i} " * 40)]) for i in range(2_002)]
    adapter.encode_request(ModelRequest(model="x", system="s", messages=Counted(plain[:2_000]), tools=TOOLS))
    follow_up = ModelRequest(model="x", system="s", messages=Counted(plain), tools=TOOLS)
    tracemalloc.start()
    try:
        body = adapter.encode_request(follow_up)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(body) > 500_000
    assert peak < 1.3 * len(body), f"{peak / len(body):.2f} bodies allocated at once for one request"
    assert body == make_provider(model, "", OFFLINE).encode_request(ModelRequest(model="x", system="s", messages=plain, tools=TOOLS))


class Escaped(Reread):
    """A history that holds its user texts JSON-escaped already (a conversation's entries, as the
    store got them); counts what the adapter asks of it."""

    def __init__(self, messages: list[Message], escaped: dict[int, bytes]) -> None:
        super().__init__(messages)
        self.escaped = escaped
        self.asked: list[int] = []

    def with_text(self, index: int) -> tuple[Message, msgspec.Raw | None]:
        self.asked.append(index)
        data = self.escaped.get(index)
        return self[index], None if data is None else msgspec.Raw(data)


@pytest.mark.parametrize("kind", list(ProviderKind))
def test_a_user_text_escaped_already_is_spliced_not_encoded_again(kind: ProviderKind) -> None:
    """The adapter takes a user message's text as the history holds it escaped (here a marker
    that differs from the text, to see it taken), and encodes only what it is not given."""
    model = ModelConfig(id="m", provider=kind, model="x", base_url="http://127.0.0.1:9/v1")
    plain = turn(0) + [Message("user", [TextPart("next question")])]
    history = Escaped(plain, {3: b'"SPLICED \\u2028"'})
    body = make_provider(model, "", OFFLINE).encode_request(ModelRequest(model="x", system="s", messages=history))
    assert history.asked == [0, 1, 2, 3]
    assert body.count(b'"SPLICED \\u2028"') == 1 and b"next question" not in body
    fresh = make_provider(model, "", OFFLINE).encode_request(ModelRequest(model="x", system="s", messages=plain))
    assert body.replace(b'"SPLICED \\u2028"', b'"next question"') == fresh
