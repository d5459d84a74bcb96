"""A user turn's text reaches the provider as the bytes msgspec writes for it, whether the server
escaped it for this request or spliced the escaping it made for the store: texts with quotes,
control characters, non-ASCII, U+2028/2029 and astral characters, over two turns."""
from __future__ import annotations

import uuid

import msgspec

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import ScriptedIDE, run_request

from .conftest import MODEL

TEXTS = [
    'quote " back\\slash </script> tab\t cr\r nul\x00 esc\x1b del\x7f é 漢字 😀 \u2028 \u2029 ' * 300 + "end",
    "second: \u2028\u2029 \x01\x1f é 😀",
]


async def test_a_user_text_reaches_the_provider_as_msgspec_writes_it(ide: ScriptedIDE, provider: FakeProviderServer, workspace) -> None:
    conversation = uuid.uuid4().hex
    for text in TEXTS:
        provider.enqueue(OPENAI_CHAT.text(["ok"]))
        done = await ide.turn(run_request(text, model=MODEL, conversation_id=conversation, workspace=str(workspace)))
        assert done.terminal is None
    sent = [request.raw_items("messages") for request in provider.requests]
    assert len(sent) == 2 and sent[1][: len(sent[0])] == sent[0]  # the second request extends the first
    for text in TEXTS:
        escaped = msgspec.json.encode(text)[1:-1]  # inside the turn's message (between its tags)
        assert sum(item.count(escaped) for item in sent[1]) == 1, text[:40]
    for item in sent[1]:  # every item exactly as msgspec writes what it holds
        assert msgspec.json.encode(msgspec.json.decode(item)) == item
