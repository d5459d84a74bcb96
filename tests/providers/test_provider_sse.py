"""The SSE reader hands out the events httpx-sse's decoders make of the same bytes, however the
body is cut into reads (every cut point of each stream is tried)."""
from __future__ import annotations

import pytest
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from cursor_byok.providers.sse import SSEReader
from tests.fakes import DIALECTS, CallSpec

STREAMS = {
    "lf": b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n',
    "crlf": b"event: one\r\ndata: x\r\n\r\nevent: two\r\ndata: y\r\n\r\n",
    "cr": b"data: x\r\rdata: y\r\r",
    "mixed ends": b"data: a\r\n\ndata: b\n\r\ndata: c\r\r\n",
    "multi-line data and no space": b"data:first\ndata: second\ndata\n\n",
    "comments, unknown fields, retry, id": b": keep-alive\nretry: 250\nfoo: bar\nid: 7\ndata: z\n\n\n",
    "event without data": b"event: ping\n\nevent: message_stop\ndata: {}\n\n",
    "bad retry and an id with NUL": b"retry: soon\nid: a\x00b\ndata: q\n\n",
    "utf-8 across reads": "data: é€😀 done\n\n".encode(),
    "invalid utf-8": b"data: \xff\xfe ok\n\n",
    "ends without its blank line": b"data: complete\n\ndata: cut",
    "ends with a lone CR": b"data: last\r",
    "ends with CR after a blank line": b"data: last\n\r",
    "empty": b"",
}


def httpx_sse_events(reads: list[bytes]) -> list[tuple[str, str]]:
    lines, events = SSELineDecoder(), SSEDecoder()
    text = b"".join(reads).decode("utf-8", "replace")
    found = []
    for line in ([*lines.decode(text), *lines.flush()] if text else []):
        sse = events.decode(line)
        if sse is not None:
            found.append((sse.event, sse.data))
    return found


def ours(reads: list[bytes]) -> list[tuple[str, str]]:
    reader = SSEReader()
    found = []
    for read in reads:
        found += reader.feed(read)
    return found + reader.close()


@pytest.mark.parametrize("body", list(STREAMS.values()), ids=list(STREAMS))
def test_same_events_as_httpx_sse_at_every_cut(body: bytes) -> None:
    expected = httpx_sse_events([body])
    for cut in range(len(body) + 1):
        for cut2 in (cut, min(len(body), cut + 1), min(len(body), cut + 3)):
            reads = [body[:cut], body[cut:cut2], body[cut2:]]
            assert ours([r for r in reads if r]) == expected, (cut, cut2)


@pytest.mark.parametrize("kind", list(DIALECTS))
def test_each_provider_dialect_reads_the_same(kind) -> None:
    dialect = DIALECTS[kind]
    for reply in (dialect.text(["Hel", "lo"]), dialect.tool_calls([CallSpec("call_1", "Read", ['{"path"', ': "a"}'])])):
        assert ours(reply.chunks) == httpx_sse_events(reply.chunks) != []


def test_seen_tells_whether_any_event_came() -> None:
    reader = SSEReader()
    assert reader.feed(b": only a comment\n\n") == [] and not reader.seen
    assert reader.feed(b"data: x\n\n") == [("message", "x")] and reader.seen
