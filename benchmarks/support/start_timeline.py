"""A turn start's timeline inside a benchmarked server: monotonic stamps (ns, the same clock as the
benchmark's and the stamp provider's) and the loop thread's CPU clock at the steps of a start, for
`benchmarks/test_start_timeline.py`.

Off unless BENCH_TIMELINE_OUT names a file: then `cprofile_site` (on the servers' path) calls
`install()`, which wraps a few functions of the server as their modules are imported (nothing in
`src` knows of it, so the tree measured is the tree as it is). A wrapper adds a stamp before or
after the call it wraps; the stamps are written out after each BidiAppend is answered, off the
start's path (`FLUSH_AFTER_SECONDS` later). The steps (ours; the floor, `bare_turn_app`, has the ones
marked *; the durable floor, `bare_durable_app`, those and its commit's two, marked +):

    in:<method>*      the ASGI call begins (granian has handed the request to the loop)
    body:<method>*    its body is read
    decoded           the append is decoded
    deliver           the gateway hands it to the conversation side (its checks passed)
    runtime           the conversation's runtime takes the run request
    commit+           the turn's input is handed to the store to commit now (the durable floor: its INSERT begins)
    committed+        ... and is committed (on the loop) or handed to the writer thread
    engine            the run engine starts (the input prepared)
    write             the provider request is written (our HTTP client's exchange begins)
    replied           the append is answered
    bytes_in*         the provider's first bytes reach its connection's protocol (aiohttp's, in both)
    response*         the provider's response head is read (ours: our HTTP client's response is made;
                      the floor: aiohttp's response has started)
    attached          the RunSSE found its stream
    delivered         the hand-over returned to the gateway
    task*             the floor's provider task begins (it then posts through aiohttp)
"""
from __future__ import annotations

import asyncio
import atexit
import functools
import importlib.abc
import importlib.machinery
import os
import resource
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

OUT = os.environ.get("BENCH_TIMELINE_OUT", "")
# (monotonic ns, loop thread CPU ns, its voluntary and involuntary context switches so far, step):
# a wait off the CPU with a voluntary switch is the thread's own (a lock, the interpreter's among
# them, or I/O); with an involuntary one, another thread or process had the CPU.
_stamps: list[tuple[int, int, int, int, str]] = []


def stamp(step: str) -> None:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    _stamps.append((time.monotonic_ns(), time.thread_time_ns(), usage.ru_nvcsw, usage.ru_nivcsw, step))


FLUSH_AFTER_SECONDS = 0.05  # the stamps are written this long after a start's append is answered: off its path


def flush() -> None:
    if _stamps:
        with open(OUT, "a") as out:
            out.writelines(" ".join(map(str, row)) + "\n" for row in _stamps)
        _stamps.clear()


def flush_later() -> None:
    asyncio.get_running_loop().call_later(FLUSH_AFTER_SECONDS, flush)


def _method(scope: dict[str, Any]) -> str:
    return str(scope.get("path", "")).rsplit("/", 1)[-1]


def _before(step: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        stamp(step)
        return fn(*args, **kwargs)

    return wrapper


def _around(before: str, after: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        stamp(before)
        try:
            return fn(*args, **kwargs)
        finally:
            stamp(after)

    return wrapper


def _after(step: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        stamp(step)
        return result

    return wrapper


def _before_async(step: Callable[..., str], fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (a coroutine function) with a stamp when its first step begins."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        stamp(step(*args))
        return await fn(*args, **kwargs)

    return wrapper


def _answered(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An ASGI handler whose stamps are written out once it has answered."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        finally:
            stamp("replied")
            flush_later()

    return wrapper


def _body_read(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(self: Any, scope: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        body = await fn(self, scope, *args, **kwargs)
        stamp(f"body:{_method(scope)}")
        return body

    return wrapper


def _patch_gateway(module: ModuleType) -> None:
    from cursor_byok.gateway import bidi, pending
    from cursor_byok.protocol import BIDI_APPEND_PATH

    gateway = module.Gateway
    gateway.__call__ = _before_async(lambda self, scope, *_: f"in:{_method(scope)}", gateway.__call__)
    pending.Pending.read_body = _body_read(pending.Pending.read_body)
    bidi.decode_bidi_append = _after("decoded", bidi.decode_bidi_append)
    bidi.deliver_local = _around("deliver", "delivered", bidi.deliver_local)
    module._AGENT_ROUTES[BIDI_APPEND_PATH] = _answered(module._AGENT_ROUTES[BIDI_APPEND_PATH])


def _patch_runtime(module: ModuleType) -> None:
    runtime = module.ConversationRuntime
    runtime._on_start_run = _before("runtime", runtime._on_start_run)
    runtime._run_engine = _before("engine", runtime._run_engine)


def _patch_service(module: ModuleType) -> None:
    service = module.ConversationService
    service.attach = _before("attached", service.attach)


def _patch_store(module: ModuleType) -> None:
    core = module.StoreCore
    core.hand_over_now = _around("commit", "committed", core.hand_over_now)


def _patch_http_client(module: ModuleType) -> None:
    module._exchange = _before_async(lambda *_: "write", module._exchange)
    module.ProviderResponse.__init__ = _after("response", module.ProviderResponse.__init__)
    _patch_aiohttp_protocol()


def _patch_aiohttp_protocol() -> None:
    from aiohttp.client_proto import ResponseHandler

    ResponseHandler.data_received = _before("bytes_in", ResponseHandler.data_received)


def _patch_floor(module: ModuleType) -> None:
    _patch_app(module)
    module.forward = _before_async(lambda *_: "task", module.forward)
    response = module.aiohttp.ClientResponse
    started = response.start

    async def start(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = await started(self, *args, **kwargs)
        stamp("response")
        return result

    response.start = start
    _patch_aiohttp_protocol()


def _patch_durable(module: ModuleType) -> None:
    """The durable floor: its app as the floor's (its other steps are the floor's own module's), and its commit."""
    _patch_app(module)
    journal = module.SqliteJournal
    journal.commit = _around("commit", "committed", journal.commit)


def _patch_app(module: ModuleType) -> None:
    """A floor's ASGI app with the stamps of a request's arrival and body."""
    inner = module.app

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await inner(scope, receive, send)
        method = _method(scope)
        stamp(f"in:{method}")

        async def read() -> dict[str, Any]:
            message = await receive()
            if not message.get("more_body"):
                stamp(f"body:{method}")
            return message  # type: ignore[no-any-return]

        try:
            await inner(scope, read, send)
        finally:
            if method == "BidiAppend":
                flush_later()

    module.app = app


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "cursor_byok.gateway.app": _patch_gateway,
    "cursor_byok.conversation.runtime": _patch_runtime,
    "cursor_byok.conversation.service": _patch_service,
    "cursor_byok.store.core": _patch_store,
    "cursor_byok.http_client": _patch_http_client,
    "benchmarks.support.bare_turn_app": _patch_floor,
    "benchmarks.support.bare_durable_app": _patch_durable,
}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, patch: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        patch = PATCHES.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(name, path, target)  # type: ignore[attr-defined]
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def install() -> None:
    sys.meta_path.insert(0, _Finder())
    atexit.register(flush)  # what the last start left unwritten
