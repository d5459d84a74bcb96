"""The context estimate a run starts from is the history's, kept across runs: a follow-up run sizes
only the messages added since the last one (not every message of a long conversation), uses the
provider's last reported input tokens, and starts over after a compaction or on another model."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from cursor_byok.run import (
    CompactionStarted,
    ContextEstimator,
    KeyedMessages,
    Message,
    RetryPolicy,
    RunEngine,
    RunSpec,
    TextPart,
    estimate_tokens,
    make_provider,
)
from tests.fakes import OPENAI_CHAT, UsageSpec, fake_model
from tests.run.support import MemoryHistory, RecordingSink, ScriptedTools, user


class CountedMessages(KeyedMessages):
    """A history's messages as the engine is handed them (keyed, as a conversation's are), counting
    every message read out of them."""

    def __init__(self, history: KeyedHistory, items: list[Message]) -> None:
        self.history, self.items = history, items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            return CountedMessages(self.history, self.items[index])
        self.history.reads += 1
        return self.items[index]

    def __iter__(self) -> Iterator[Message]:
        return (self[i] for i in range(len(self)))

    def source(self) -> str:
        return "conversation"

    def key(self, index: int) -> str:
        return str(id(self.items[index]))  # the list holds the message: its id names it meanwhile


class KeyedHistory(MemoryHistory):
    def __init__(self, *initial: Message) -> None:
        super().__init__(*initial)
        self.reads = 0

    def messages(self) -> CountedMessages:  # type: ignore[override]
        return CountedMessages(self, self.items)


def long_history(messages: int) -> list[Message]:
    return [user(f"question {i} " * 20) if i % 2 == 0 else Message("assistant", [TextPart(f"answer {i} " * 40)])
            for i in range(messages)]


@pytest.fixture
def model(fake_server):
    return fake_model(OPENAI_CHAT.kind, fake_server.url, context_window=100_000)


def engine(model, http_client, adapters={}):  # noqa: B006 - one adapter per model for every run, as the server keeps them
    key = (model.id, model.base_url, id(http_client))
    if key not in adapters:
        adapters[key] = make_provider(model, "test-key-123456", http_client, retry=RetryPolicy(max_retries=0))
    return RunEngine(adapters[key])


@pytest.mark.parametrize("messages", [10, 400])
async def test_a_follow_up_run_reads_only_the_messages_added_since(messages: int, model, fake_server, http_client) -> None:
    fake_server.respond_with(lambda _: OPENAI_CHAT.text(["ok"], UsageSpec(input=5_000)))
    history = KeyedHistory(*long_history(messages))
    spec = RunSpec(model=model, system="system prompt", tools=[])
    await engine(model, http_client).run(spec, history, ScriptedTools(), RecordingSink())
    history.items.append(user("and one more thing"))
    history.reads = 0

    await engine(model, http_client).run(spec, history, ScriptedTools(), RecordingSink())

    # The answer run 1 committed and the new user message, each read once to size it and once to
    # encode it. Nothing of the earlier history, however long.
    assert history.reads == 2 * 2
    assert len(fake_server.requests) == 2


async def test_a_follow_up_run_starts_from_the_providers_last_count(model, fake_server, http_client) -> None:
    # Run 1's provider counted 89,000 input tokens (its system prompt, tools and messages as it
    # tokenizes them); chars/4 of the history is far less. Run 2 adds ~1,500 tokens: over 90,000,
    # so it compacts before its first call.
    fake_server.enqueue(
        OPENAI_CHAT.text(["ok"], UsageSpec(input=89_000)),
        OPENAI_CHAT.text(["summary"]),
        OPENAI_CHAT.text(["answer"]),
    )
    history = KeyedHistory(user("hello"))
    spec = RunSpec(model=model, system="system prompt", tools=[])
    await engine(model, http_client).run(spec, history, ScriptedTools(), RecordingSink())
    history.items.append(user("x" * 6_000))
    sink = RecordingSink()

    await engine(model, http_client).run(spec, history, ScriptedTools(), sink)

    started, = sink.of(CompactionStarted)
    assert started.estimated_tokens == 89_000 + (len("ok") + 6_000) // 4 + 2 * 4  # the answer "ok" and the new message
    assert history.summaries == ["summary"]


async def test_another_model_or_prompt_does_not_use_the_count(model, fake_server, http_client) -> None:
    fake_server.respond_with(lambda _: OPENAI_CHAT.text(["ok"], UsageSpec(input=89_000)))
    history = KeyedHistory(user("hello"))
    await engine(model, http_client).run(RunSpec(model=model, system="system prompt", tools=[]), history, ScriptedTools(), RecordingSink())
    history.items.append(user("x" * 6_000))
    other = model.__copy__()
    other.model = "another-model"  # another tokenizer
    for spec in (RunSpec(model=other, system="system prompt", tools=[]), RunSpec(model=model, system="another prompt", tools=[])):
        sink = RecordingSink()
        history.reads = 0
        await engine(spec.model, http_client).run(spec, history, ScriptedTools(), sink)
        assert sink.of(CompactionStarted) == []  # chars/4 of what it sends: far below 90,000
        assert history.reads <= 2 + 2  # still sized from what was summed before (and encoded anew for another model)


def test_the_estimate_adds_the_new_messages_to_what_it_summed() -> None:
    messages = [user("a" * 400), Message("assistant", [TextPart("b" * 400)])]
    estimator = ContextEstimator()
    estimator.for_run(4000, "model")
    assert estimator.estimate(messages) == estimate_tokens(messages, 4000) == 1000 + 100 + 100 + 8
    estimator.anchor(5000, messages)  # the provider counted 5,000 tokens for these
    assert estimator.estimate(messages) == 5000
    more = [*messages, user("c" * 40)]
    assert estimator.estimate(more) == 5000 + 10 + 4
    assert estimator.sized == 3  # each message once
    estimator.for_run(4000, "another model")
    assert estimator.estimate(more) == estimate_tokens(more, 4000)
    assert estimator.sized == 3
    estimator.reset()
    assert estimator.estimate(messages) == 1208 and estimator.sized == 5


def test_a_history_that_does_not_extend_the_one_summed_is_summed_again() -> None:
    messages = [user("a" * 400), user("b" * 400)]
    estimator = ContextEstimator()
    estimator.for_run(0, "model")
    estimator.anchor(5000, messages)
    other = [user("a" * 400), user("c" * 800)]  # the same length, another last message
    assert estimator.estimate(other) == estimate_tokens(other)
    assert estimator.estimate(other[:1]) == estimate_tokens(other[:1])  # shorter
