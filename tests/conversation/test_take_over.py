"""Taking one conversation over (another instance's owner stopped): what a restart does, for that
conversation alone. Its cut runs are marked so, and only its runs are read: a take-over must not
read every conversation's unfinished runs (a cluster's database holds many instances' live ones).
"""
from __future__ import annotations

from pathlib import Path

from cursor_byok.store import ConversationRecord, RunOutcome, RunRecord
from tests.fakes import FakeProviderServer
from tests.harness.inprocess import Rig


async def test_taking_one_conversation_over_reads_and_marks_only_its_runs(tmp_path: Path, provider: FakeProviderServer) -> None:
    statements: list[str] = []
    rig = await Rig(tmp_path, provider, store_options={"trace": statements.append}).start()
    try:
        store = rig.store
        assert store is not None
        for conversation_id in ("mine", "theirs"):
            store.upsert_conversation(ConversationRecord(conversation_id, 1_000, 1_000))
            store.start_run(RunRecord(f"{conversation_id}-run", conversation_id, "modeling", started_at_ms=1_000))
        await store.flush()
        statements.clear()

        await rig.service.restore(conversation_id="mine")

        unfinished_reads = [s for s in statements if s.lstrip().startswith("SELECT") and "outcome IS NULL" in s]
        assert unfinished_reads and all("conversation_id = " in s for s in unfinished_reads), unfinished_reads
        assert (await store.get_run("mine-run")).outcome == RunOutcome.INTERRUPTED_BY_CRASH  # type: ignore[union-attr]
        assert (await store.get_run("theirs-run")).outcome is None  # type: ignore[union-attr]
    finally:
        await rig.close()
