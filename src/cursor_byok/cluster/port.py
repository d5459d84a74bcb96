"""What crosses between the cluster and the instance's gateway: a forwarded append and its answer,
the output sink of a relayed stream, and what the gateway does for the other instances (`Local`)."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import msgspec


class Forwarded(msgspec.Struct, frozen=True):
    """A BidiAppend as it came: its body and the headers its handling reads."""

    body: bytes
    content_encoding: str | None = None
    parent_request_id: str | None = None
    parent_tool_call_id: str | None = None
    developer: str | None = None  # a team server's developer whose token the request carried


class Answer(msgspec.Struct, frozen=True):
    """An append's answer: code "" is taken (its journal row durable), else a Connect error."""

    code: str = ""
    message: str = ""


class OwnerGone(Exception):
    """The owner a request was relayed to stopped answering and its lease ended."""


Sink = Callable[[bytes, bool], Awaitable[None]]  # output frames, and whether more follow


class Local(Protocol):
    """What the instance's gateway does for the cluster (`gateway.peers`)."""

    async def take_append(self, forwarded: Forwarded) -> Answer: ...

    async def serve_read(self, request_id: str, developer: str | None, sink: Sink) -> None: ...

    async def let_go(self, conversation_id: str) -> bool: ...

    async def take_over(self, conversation_id: str) -> None: ...
