"""A transport's seqno-0 fingerprint: the same event again matches, any other does not."""
from __future__ import annotations

from cursor_byok.conversation import fingerprint
from cursor_byok.protocol import client_message
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
