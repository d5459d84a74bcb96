"""The timeline of one `cursor-byok serve` start, spawn → ready: wall time and CPU at each step, and
the import time by package (`-X importtime`).

    python -m benchmarks.support.cold_timeline [STARTS]      # default 5; median per step

The server runs in a child interpreter (`-X importtime`, the same `serve` a user runs) whose steps
are stamped by wrapping the functions that do them, from outside the project's code: config
loaded, the data dir's lock held, the listener bound, the gateway package imported, the event loop
up, granian's server made, the first health probe answered, the gateway's import (in its worker
thread), each step of the gateway's start (store open with its migration check, the TLS context,
the provider pool, restore, journal recovery), ready. Each stamp: ms since spawn (this process's
`time.monotonic()` before the spawn; CLOCK_MONOTONIC is the same clock in every process), the
CPU ms of the thread that took it, and the process's CPU ms. The server stops itself once ready.

`BENCH_SRC=<tree>/src` runs another source tree (a before/after pair); `BENCH_IMPORTTIME=0` leaves
out `-X importtime` (which slows every import down: the stamps are then closer to a plain start).
"""
from __future__ import annotations

import json
import os
import sys
import time

# Only these at the top: this module is the server process's first import too.
STAMP = "@@stamp "
_SPAWNED = "BENCH_TIMELINE_SPAWNED"


# -- in the server's process -----------------------------------------------------------------------
def _stamp(step: str) -> None:
    import threading

    wall = (time.monotonic() - float(os.environ[_SPAWNED])) * 1000
    line = {"step": step, "wall": wall, "thread_cpu": time.thread_time() * 1000, "cpu": time.process_time() * 1000,
            "thread": threading.current_thread().name}
    sys.stderr.write(STAMP + json.dumps(line) + "\n")


def _after(owner: object, name: str, step: str, before: str | None = None) -> None:
    """Stamp `step` when `owner.name` returns (and `before` when it is called); async functions too."""
    import functools
    import inspect

    original = getattr(owner, name)
    if inspect.iscoroutinefunction(original):
        @functools.wraps(original)
        async def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
            if before:
                _stamp(before)
            result = await original(*args, **kwargs)
            _stamp(step)
            return result
    else:
        @functools.wraps(original)
        def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
            if before:
                _stamp(before)
            result = original(*args, **kwargs)
            _stamp(step)
            return result
    kept_static = isinstance(inspect.getattr_static(owner, name), (classmethod, staticmethod))
    setattr(owner, name, staticmethod(wrapped) if kept_static else wrapped)


def _on_import(module: str, hook) -> None:  # type: ignore[no-untyped-def]
    """Run `hook(module)` right after `module` is first imported (in whichever thread imports it),
    or now if it already is."""
    import importlib.abc
    import importlib.util

    if module in sys.modules:
        hook(sys.modules[module])
        return

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
            if name != module:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            assert spec is not None and spec.loader is not None
            loader = spec.loader
            exec_module = loader.exec_module

            def exec_and_hook(mod):  # type: ignore[no-untyped-def]
                exec_module(mod)
                hook(mod)

            loader.exec_module = exec_and_hook  # type: ignore[method-assign]
            return spec

    sys.meta_path.insert(0, Finder())


def _hook_root(root) -> None:  # type: ignore[no-untyped-def]
    import cursor_byok.store as store

    # the composition root opens the store beside the import of the rest (`running`)
    _after(store.Store, "open", "store opened (migrations checked)", before="store opening begins")


def _hook_running(root) -> None:  # type: ignore[no-untyped-def]
    import cursor_byok.conversation as conversation
    import cursor_byok.providers as providers

    _stamp("gateway modules imported")
    _after(providers.ProviderPool, "track", "provider pool started")
    _after(conversation.ConversationService, "restore", "conversations restored")
    _after(root.Gateway, "resume_journaled", "journal recovered")


def child(argv: list[str]) -> None:
    _stamp("interpreter up")
    import cursor_byok.cli as cli
    import cursor_byok.cli.serve as serve_cli

    _stamp("cli imported")
    _after(serve_cli, "load_config", "config loaded")
    _after(serve_cli, "bind_listener", "listener bound", before="lock held")

    def hook_gateway(_) -> None:  # type: ignore[no-untyped-def]
        _stamp("gateway package imported (before listening)")
        _after(sys.modules["cursor_byok.gateway.serve"], "_embedded_server", "granian server made", before="event loop up")

    _on_import("cursor_byok.gateway", hook_gateway)

    def hook_front(front) -> None:  # type: ignore[no-untyped-def]
        import signal

        answered = front.LoadingFront._answered_health

        async def first_answer(self, scope, send):  # type: ignore[no-untyped-def]
            result = await answered(self, scope, send)
            if not getattr(first_answer, "seen", False):
                first_answer.seen = True  # type: ignore[attr-defined]
                _stamp("first health probe answered")
            return result

        front.LoadingFront._answered_health = first_answer
        load = front.LoadingFront.load

        async def loaded(self):  # type: ignore[no-untyped-def]
            gateway = await load(self)
            _stamp("ready (gateway started)")
            os.kill(os.getpid(), signal.SIGTERM)
            return gateway

        front.LoadingFront.load = loaded

    _on_import("cursor_byok.gateway.front", hook_front)
    _on_import("cursor_byok.server", _hook_root)
    _on_import("cursor_byok.running", _hook_running)
    _on_import("cursor_byok.trust_store", lambda store: _after(store, "verified", "trust store built"))
    cli.main(argv)


# -- in this process ---------------------------------------------------------------------------------
_IMPORT_LINE = r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)"


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in ("cursor_byok", "google") else parts[0]


def one_start() -> tuple[list[dict[str, object]], dict[str, float]]:
    """One start: its stamps, and import self-time (ms) by package."""
    import re
    import subprocess
    import tempfile
    from collections import defaultdict
    from pathlib import Path

    from benchmarks.support.cold_start import CONFIG, HOST, ROOT, free_port

    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        config = Path(tmp) / "config.toml"
        config.write_text(CONFIG.format(host=HOST, port=port, data=Path(tmp) / "data"))
        path = os.pathsep.join(p for p in (os.environ.get("BENCH_SRC"), str(ROOT)) if p)
        code = f"from benchmarks.support.cold_timeline import child; child(['serve', '--config', {str(config)!r}])"
        env = {**os.environ, "PYTHONPATH": path, "CURSOR_BYOK_TEST_KEY": "sk-bench"}
        prober = subprocess.Popen([sys.executable, "-c", _PROBE, str(port)], stdout=subprocess.PIPE, text=True)
        env[_SPAWNED] = repr(time.monotonic())
        importtime = ["-X", "importtime"] if os.environ.get("BENCH_IMPORTTIME", "1") != "0" else []
        out = subprocess.run([sys.executable, *importtime, "-c", code], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        probe_ms = float(prober.communicate(timeout=10)[0] or "nan")
    stamps = [json.loads(line[len(STAMP):]) for line in out.stderr.splitlines() if line.startswith(STAMP)]
    stamps.append({"step": "first health answer seen from outside", "wall": probe_ms - float(env[_SPAWNED]) * 1000,
                   "thread_cpu": float("nan"), "cpu": float("nan"), "thread": "client"})
    by_package: dict[str, float] = defaultdict(float)
    for match in re.finditer(_IMPORT_LINE, out.stderr):
        by_package[package_of(match.group(4))] += int(match.group(1)) / 1000
    if not any(s["step"].startswith("ready") for s in stamps):
        raise SystemExit(f"the server did not get ready:\n{out.stderr[-3000:]}")
    return stamps, by_package


# The first health probe answered, seen from outside (a 1 ms poll): monotonic ms.
_PROBE = """
import socket, sys, time
port = int(sys.argv[1])
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(f"GET /__byok-api__/healthz HTTP/1.1\\r\\nhost: 127.0.0.1:{port}\\r\\nconnection: close\\r\\n\\r\\n".encode())
            if s.recv(4096).split(b" ", 2)[1] == b"204":
                print(time.monotonic() * 1000)
                break
    except (OSError, IndexError):
        pass
    time.sleep(0.001)
"""


def main(starts: int) -> None:
    import statistics

    runs = [one_start() for _ in range(starts + 1)][1:]  # the first warms the page cache
    print(f"serve, spawn → ready: {starts} starts, load average {os.getloadavg()[0]:.2f}; median ms")
    print(f"{'step':<46} {'wall':>7} {'thread CPU':>11} {'process CPU':>12}  thread")
    for i, stamp in enumerate(runs[0][0]):
        same = [run[0][i] for run in runs]
        med = {key: statistics.median(s[key] for s in same) for key in ("wall", "thread_cpu", "cpu")}
        print(f"{stamp['step']:<46} {med['wall']:7.1f} {med['thread_cpu']:11.1f} {med['cpu']:12.1f}  {stamp['thread']}")
    packages = {p: statistics.median(run[1].get(p, 0.0) for run in runs) for p in set().union(*(run[1] for run in runs))}
    if not packages:
        return
    print("\nimport self-time by package (-X importtime, wall, median ms; all threads):")
    for package, ms in sorted(packages.items(), key=lambda kv: -kv[1])[:30]:
        print(f"  {package:<36} {ms:6.1f}")
    print(f"  {'(all)':<36} {sum(packages.values()):6.1f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
