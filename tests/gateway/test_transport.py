"""Transports: a seqno-0 fingerprint tells a resend from a different one; the limit never drops a live run."""
from __future__ import annotations

import pytest

from cursor_byok.conversation import fingerprint
from cursor_byok.gateway.transport import Route, Transports
from cursor_byok.protocol import ConnectError, client_message
from tests.harness.ide import run_request


def test_the_fingerprint_tells_a_resend_from_a_different_seqno0() -> None:
    raw = run_request("hello " * 2000, model="m", conversation_id="c").SerializeToString()
    first = client_message("r", 0, raw)
    again = client_message("r", 0, bytes(bytearray(raw)))  # the same bytes, decoded again
    assert fingerprint(again) == fingerprint(first)
    for changed in (raw[:-1] + bytes([raw[-1] ^ 1]), raw + b"\x00", raw[:-1]):
        try:
            other = client_message("r", 0, changed)
        except Exception:  # noqa: BLE001 - a change that does not parse is not an append
            continue
        assert fingerprint(other) != fingerprint(first)


def test_at_the_limit_a_transport_whose_run_ended_gives_way_and_a_live_one_never_does() -> None:
    """Dropping a live run's transport leaves its next append nowhere to go: at the limit the new
    one is refused instead (nothing allocated), and one whose run has ended makes room."""
    live = {"a", "b"}
    transports = Transports(2, idle_seconds=3600, run_is_live=live.__contains__)
    transports.create("a", Route.LOCAL)
    transports.create("b", Route.LOCAL)
    with pytest.raises(ConnectError) as refused:
        transports.create("c", Route.LOCAL)
    assert refused.value.code == "resource_exhausted"
    assert transports.get("a") is not None and transports.get("b") is not None and transports.get("c") is None
    live.discard("a")  # its run ended
    transports.create("c", Route.LOCAL)
    assert transports.get("a") is None and transports.get("b") is not None and transports.get("c") is not None
