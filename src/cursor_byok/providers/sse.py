"""Server-sent events from a response body's bytes, as they arrive.

A stream's lines end in LF, CRLF or CR (a CR that ends a chunk waits for the next one, which may
begin with its LF); a blank line ends an event. `event:` names it, `data:` lines make its data
(joined by LF), `id:` and `retry:` are read, `:` lines are comments, other fields are ignored, and a
value loses one leading space. An event is handed out when its blank line comes and any field was
set since the last one (or an id ever was), as the decoders of httpx-sse do: the same events, for
a fraction of the work (one split per chunk, not a decoder call per line and an object per event).
"""
from __future__ import annotations

import codecs

_Utf8Decoder = codecs.getincrementaldecoder("utf-8")

Event = tuple[str, str]
"""(event name, data); the name is "message" when the event named none."""


class SSEReader:
    __slots__ = ("_text", "_rest", "_name", "_data", "_id", "_retry", "seen")

    def __init__(self) -> None:
        self._text = _Utf8Decoder("replace")  # SSE is UTF-8 by definition; a bad byte becomes U+FFFD
        self._rest = ""  # the unfinished last line (with a CR that may still get its LF)
        self._name = ""
        self._data: list[str] | None = None  # None: no data line since the last event
        self._id = ""
        self._retry: int | None = None
        self.seen = False  # any event at all arrived

    def feed(self, chunk: bytes) -> list[Event]:
        text = self._rest + self._text.decode(chunk)
        held = ""
        if "\r" in text:
            if text[-1] == "\r":
                held, text = "\r", text[:-1]
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        self._rest = lines.pop() + held
        return self._events(lines) if lines else []

    def close(self) -> list[Event]:
        """Whatever the end of the body completes (an unterminated last event is dropped, per SSE)."""
        text = self._rest + self._text.decode(b"", True)
        self._rest = ""
        if not text:
            return []
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        if not lines[-1]:
            lines.pop()  # the text ended with its last line's end: no line after it
        return self._events(lines)

    def _events(self, lines: list[str]) -> list[Event]:
        events: list[Event] = []
        for line in lines:
            if not line:
                if self._data is not None or self._name or self._id or self._retry is not None:
                    events.append((self._name or "message", "\n".join(self._data) if self._data else ""))
                    self._name, self._data, self._retry = "", None, None
                continue
            if line[0] == ":":
                continue
            field, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if field == "data":
                if self._data is None:
                    self._data = [value]
                else:
                    self._data.append(value)
            elif field == "event":
                self._name = value
            elif field == "id":
                if "\0" not in value:
                    self._id = value
            elif field == "retry":
                try:
                    self._retry = int(value)
                except ValueError:
                    pass
        if events:
            self.seen = True
        return events
