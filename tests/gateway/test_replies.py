"""Unary replies: an append's empty 200 (its headers built once) reads as any other reply."""
from __future__ import annotations

from typing import Any

from cursor_byok.gateway.asgi import PROTO_HEADERS, reply, reply_proto


async def sent_by(answer: Any, *args: Any) -> list[dict[str, Any]]:
    """The messages an answer sends, each one's headers as a list."""
    messages: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        messages.append({**message, "headers": list(message["headers"])} if "headers" in message else message)

    await answer(send, *args)
    return messages


async def test_an_empty_proto_reply_is_the_reply_of_an_empty_body_every_time() -> None:
    expected = await sent_by(reply, 200, b"", PROTO_HEADERS)
    assert await sent_by(reply_proto) == expected
    assert await sent_by(reply_proto) == expected
    assert await sent_by(reply_proto, b"\x08\x01") == await sent_by(reply, 200, b"\x08\x01", PROTO_HEADERS)
