"""Per-request state is bounded (issue 20, scenario 5): every turn comes on a new request id, so what
the runtime keeps per request id (blob-sync sets and waiters, bindings) must go once that stream is
done, or a long conversation grows without bound. Bindings stay in the store's table; memory keeps a
bounded cache of them."""
from __future__ import annotations

import uuid
from pathlib import Path

from tests.fakes import OPENAI_CHAT, FakeProviderServer
from tests.harness.ide import cancel_message, run_request
from tests.harness.inprocess import MODEL, Rig


async def test_state_of_finished_request_ids_goes_when_their_stream_is_done(tmp_path: Path, provider: FakeProviderServer) -> None:
    rig = await Rig(tmp_path, provider, store_options={"binding_cache": 4}, blob_ack_timeout=0.3).start()
    try:
        ide = rig.ide()
        conv = uuid.uuid4().hex
        provider.respond_with(lambda request: OPENAI_CHAT.text(["ok"]))
        request_ids = []
        state = None
        for turn in range(12):
            msg = run_request(f"turn {turn}", model=MODEL, conversation_id=conv)
            if state is not None:
                msg.run_request.conversation_state.CopyFrom(state)  # as the IDE does
            request_ids.append(uuid.uuid4().hex)
            log = await ide.turn(msg, request_id=request_ids[-1])
            assert log.terminal is None
            state = log.messages[-1].conversation_checkpoint_update
        ide.hold_kv = True  # one turn whose blob acks never come: its waiters time out
        request_ids.append(uuid.uuid4().hex)
        log = await ide.turn(run_request("unacked", model=MODEL, conversation_id=conv), request_id=request_ids[-1])
        assert log.terminal is None and "conversation_checkpoint_update" not in log.kinds()
        runtime = rig.runtime(conv)
        assert runtime is not None
        assert runtime.data.blobs.request_ids() == set()  # nothing held for a finished request id
        rig.service.hub.sweep(now=float("inf"))  # their replay window is over
        assert rig.service.registry.bound_streams() == 0
        assert sum(rig.service.registry.binding(rid) is not None for rid in request_ids) <= 4  # the cache's worth
        assert rig.service.registry.binding(request_ids[0]) is None
        # A late append on one of them is still routed (through the store) and refused as stale.
        late = await ide.append(request_ids[0], cancel_message())
        assert late.status_code != 200 and "ended" in late.text
    finally:
        await rig.close()

