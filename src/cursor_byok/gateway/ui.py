"""The dashboard (/ui/, its API under /ui/api/) and GET /metrics, behind the request guard like every
route. Both show what the server did: listening beyond loopback they need the auth token."""
from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from ..observability import UI_HEADERS
from ..protocol import ConnectError
from .asgi import Receive, Scope, Send, reply, reply_error
from .routing import UI_PATH, UI_PREFIX

if TYPE_CHECKING:
    from .app import Gateway

MAX_UI_BODY = 64 * 1024
NO_DASHBOARD = ConnectError("unavailable", "observability is off (set [observability] enabled = true)")
CAPTURE_API = UI_PREFIX + "api/capture"  # served with the dashboard off too: `cursor-byok capture` asks it
_CAPTURE_SWITCH = asyncio.Lock()  # one start or stop at a time: two at once would leave a writer running


async def handle_ui(gw: Gateway, scope: Scope, receive: Receive, send: Send, path: str) -> None:
    if path == UI_PATH:  # relative: under a `/_token/<token>/` prefix the browser keeps it
        await reply(send, 308, b"", [(b"location", b"ui/")])
        return
    if path == CAPTURE_API:
        await handle_capture(gw, scope, send)
        return
    if gw.dashboard is None:
        await reply_error(send, NO_DASHBOARD)
        return
    method = scope["method"]
    body = b""
    if method not in ("GET", "HEAD"):
        try:
            body = await gw.pending.read_body(scope, receive, MAX_UI_BODY, gw.config.server.body_read_timeout_seconds)
        except ConnectError as err:
            await reply_error(send, err)
            return
    query = scope.get("query_string", b"").decode("latin-1")
    answer = await gw.dashboard.respond(method, path[len(UI_PREFIX):], query, body)
    await reply(send, answer.status, answer.body, [(b"content-type", answer.content_type.encode()), *UI_HEADERS])


async def handle_root(gw: Gateway, send: Send) -> None:
    """`GET /` asked of this server directly (the proxy's requests for `/` still go upstream): what
    runs here and where to look, as plain text for a browser and for curl alike."""
    from .. import __version__

    lines = [
        f"cursor-byok {__version__} is running here.",
        "",
        "dashboard: /ui/",
        "metrics:   /metrics",
        "",
        "Cursor reaches this server through the cursor-byok proxy (`cursor-byok cursor enable`);",
        "`cursor-byok doctor` checks the whole chain.",
    ]
    await reply(send, 200, ("\n".join(lines) + "\n").encode(), [(b"content-type", b"text/plain; charset=utf-8"), *UI_HEADERS])


async def handle_capture(gw: Gateway, scope: Scope, send: Send) -> None:
    """GET: whether capture is on; POST: read the data dir's capture settings again (after
    `cursor-byok capture start|stop`), answering once a stopped capture is all written."""
    if scope["method"] == "POST":
        from ..capture import sync_capture  # its recorder: only once a capture is asked for

        async with _CAPTURE_SWITCH:
            gw.capture, status = await asyncio.to_thread(sync_capture, gw.capture, gw.config)
    else:
        status = gw.capture.status() if gw.capture is not None else {"on": False}
    await reply(send, 200, json.dumps(status).encode(), [(b"content-type", b"application/json"), *UI_HEADERS])


async def handle_metrics(gw: Gateway, send: Send) -> None:
    page, content_type = gw.metrics.render()
    await reply(send, 200, page, [(b"content-type", content_type.encode()), (b"cache-control", b"no-store")])
