"""Cursor's own agent SDK (`@cursor/sdk` 1.0.32) running local agents against the real server:
its transport (RunSSE + BidiAppend over HTTP/1.1), its model check, its own tool executor."""
from __future__ import annotations

from pathlib import Path

from tests.fakes import OPENAI_CHAT, FakeProviderServer

from .client import SdkDriver
from .conftest import MODEL


def test_a_text_turn(sdk: SdkDriver, fresh_provider: FakeProviderServer, workspace: Path) -> None:
    fresh_provider.enqueue(OPENAI_CHAT.text(["Hello ", "from ", "BYOK"]))
    run = sdk.run(MODEL, workspace, [{"prompt": "say hello"}])
    result = run.result(0)
    assert (result["status"], result["result"]) == ("finished", "Hello from BYOK")
    assert run.text(0) == "Hello from BYOK"
    assert len(fresh_provider.requests) == 1
    sent = fresh_provider.requests[0].json()["messages"]
    assert "say hello" in str(sent[-1]["content"])
