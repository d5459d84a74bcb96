"""Run the real server (`cursor-byok serve`) in a subprocess on a free loopback port."""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from cursor_byok.config import Config, load


def session_members(sid: int) -> list[int]:
    """Pids of the live (not zombie) processes in session `sid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces, so split after its ")".
        state, _ppid, _pgrp, session = stat.rsplit(")", 1)[1].split()[:4]
        if int(session) == sid and state != "Z":
            members.append(int(entry.name))
    return members


def listeners(port: int) -> int:
    """How many TCP sockets listen on `port` (any address, IPv4 or IPv6)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as fh:
            next(fh)
            for line in fh:
                local, _remote, state = line.split()[1:4]
                count += state == "0A" and int(local.rsplit(":", 1)[1], 16) == port
    return count


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports free now: bound together while chosen (two `free_port()`
    calls can return one port twice, and a config naming it for two listeners is refused)."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


@dataclass
class ModelSpec:
    id: str
    provider: str
    base_url: str
    model: str = "fake-model"
    api_key_env: str = "CURSOR_BYOK_TEST_KEY"
    context_window: int = 200_000
    max_output_tokens: int = 4096
    extra: str = ""  # more TOML lines of this [[models]] table, e.g. 'price = { input = 3.0 }'


@dataclass
class ServerConfig:
    data_dir: Path
    models: list[ModelSpec] = field(default_factory=list)
    upstream: str = "http://127.0.0.1:9"  # nothing listens: upstream calls fail fast unless a test sets it
    runsse_wait_seconds: float = 5.0
    output_retention_seconds: float = 60.0
    continuation_window_seconds: float | None = None  # None: the server's default (no window)
    extra_server: dict[str, object] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)  # Cursor-hosted model id → one of `models`
    # Where the server keeps its state, when not in data_dir (which then holds only the config and
    # the log): e.g. a file system mounted for one test.
    state_dir: Path | None = None
    extra_toml: str = ""  # more tables, after the models (e.g. an [observability] table)
    store_url: str = ""  # a PostgreSQL database ([store] url); empty: the SQLite file in the state dir

    def toml(self, port: int) -> str:
        lines = [
            "[server]",
            *(() if "host" in self.extra_server else ('host = "127.0.0.1"',)),
            f"port = {port}",
            f'data_dir = "{self.state_dir or self.data_dir}"',
            f"runsse_wait_seconds = {self.runsse_wait_seconds}",
            f"output_retention_seconds = {self.output_retention_seconds}",
        ]
        if self.continuation_window_seconds is not None:
            lines.append(f"continuation_window_seconds = {self.continuation_window_seconds}")
        for k, v in self.extra_server.items():
            lines.append(f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"')
        lines += ["", "[upstream]", f'base_url = "{self.upstream}"', ""]
        if self.store_url:
            lines += ["[store]", f'url = "{self.store_url}"', ""]
        for m in self.models:
            lines += [
                "[[models]]",
                f'id = "{m.id}"',
                f'provider = "{m.provider}"',
                f'base_url = "{m.base_url}"',
                f'model = "{m.model}"',
                f'api_key_env = "{m.api_key_env}"',
                f"context_window = {m.context_window}",
                f"max_output_tokens = {m.max_output_tokens}",
                m.extra,
                "",
            ]
        for hosted, model in self.aliases.items():
            lines += ["[[aliases]]", f'cursor_model = "{hosted}"', f'model = "{model}"', ""]
        return "\n".join([*lines, self.extra_toml])


def one_model_config(data_dir: Path, provider_url: str, model: str, **fields: Any) -> ServerConfig:
    """A server with one OpenAI-chat model on the fake provider at `provider_url`, whose RunSSE
    gives up quickly on a seqno 0 that does not come (the restart and crash tests' server)."""
    fields.setdefault("runsse_wait_seconds", 1.5)
    return ServerConfig(
        data_dir=data_dir, models=[ModelSpec(id=model, provider="openai-chat", base_url=provider_url + "/v1")], **fields
    )


LIVE: set["ServerProcess"] = set()  # every server started and not yet stopped


@atexit.register
def _kill_leftovers() -> None:
    """A test run that dies early must not leave servers behind (they would skew later runs)."""
    for server in list(LIVE):
        server.kill()


def in_mount_namespace(*setup: str) -> list[str]:
    """A command prefix: run the rest in new user and mount namespaces after the `setup` shell
    commands, so mounts made there (a read-only or size-limited file system) are seen by that
    process only and vanish with it. Works unprivileged where user namespaces are allowed."""
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-ec", "; ".join(setup) + '; exec "$@"', "sh"]


class ServerProcess:
    def __init__(
        self, config: ServerConfig, *, env: dict[str, str] | None = None, wrap: list[str] | None = None, cursor_byok: Path | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`cursor_byok`: the executable to run (default: this interpreter's installation); `wrap`: a
        command prefix (see `in_mount_namespace`); `tls`: the server serves https (its config names a
        certificate), which this client context verifies."""
        self.config = config
        self.executable = cursor_byok
        self.port = free_port()
        self.config_path = config.data_dir / "config.toml"
        self.extra_env = env or {}
        self.wrap = wrap or []  # a command prefix, e.g. in_mount_namespace(...)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = config.data_dir / "server.log"
        self.first_health: httpx.Response | None = None  # the health answer `start` returned on
        self.tls = tls

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0, *, ready: bool = True) -> ServerProcess:
        """Spawn the server and wait until it is up (`ready=False`: only until its health probe
        answers, which it does while the gateway is still loading)."""
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config.toml(self.port))
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(self.command(), env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        LIVE.add(self)
        deadline = time.monotonic() + timeout
        pause = 0.005
        # One client for all the polls: a new one per poll costs ~40 ms of CPU (its TLS context),
        # taken from the server starting beside it.
        with httpx.Client(timeout=0.5, verify=self.tls or True) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
                try:
                    answer = client.get(self.base_url + "/__byok-api__/healthz")
                    # healthy, and not only listening: the gateway is up (no "starting" mark)
                    if answer.status_code == 204 and not (ready and "x-cursor-byok-starting" in answer.headers):
                        self.first_health = answer
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
        self.stop()
        raise RuntimeError(f"server did not become healthy:\n{self.log()}")

    def settings(self) -> Config:
        """The config this server runs with, read the way the server reads it."""
        return load(self.config_path)

    def command(self, *args: str) -> list[str]:
        """`cursor-byok <args> --config <this server's config>` (`serve` by default)."""
        return [*self.wrap, *self.command_of(self.executable, *(args or ("serve",)), "--config", str(self.config_path))]

    @staticmethod
    def command_of(executable: Path | None, *args: str) -> list[str]:
        """`cursor-byok <args>`: `executable`, else this interpreter's installation."""
        exe = executable or Path(sys.executable).with_name("cursor-byok")
        cmd = [str(exe)] if executable or exe.exists() else [sys.executable, "-m", "cursor_byok.cli"]
        return [*cmd, *args]

    def env(self) -> dict[str, str]:
        return {**os.environ, "CURSOR_BYOK_TEST_KEY": "sk-test-canary", "CURSOR_BYOK_STRICT_PREFIX": "1", **self.extra_env}

    def run_to_exit(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run `cursor-byok <args>` (`serve` by default) on this config in the foreground and wait
        for it to exit (a serve that must refuse to start, a doctor); its output is captured, and a
        run that does not exit is killed."""
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config.toml(self.port))
        child = subprocess.Popen(self.command(*args), env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            out, err = child.communicate()
        return subprocess.CompletedProcess(child.args, child.returncode, out, err)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-8000:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL of the server's whole process group: cleanup, no shutdown handlers run."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        LIVE.discard(self)

    def kill_main(self) -> None:
        """SIGKILL of the main `serve` process only, as the OOM killer or a crash does: anything it
        started is left running, and must end by itself."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def survivors(self) -> list[int]:
        """Live processes of this server's session other than the main one (it was started as a
        session leader, so its pid is the session id)."""
        return [] if self.proc is None else [pid for pid in session_members(self.proc.pid) if pid != self.proc.pid]

    # Lines the server logs only when a lifecycle or history invariant broke: a test fails on them.
    INVARIANT_ERRORS = (
        "illegal lifecycle transition",
        "runtime handler failed",
        "provider history is not an extension",
        "run failed with an unexpected error",
    )

    def invariant_errors(self) -> list[str]:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if any(marker in line for marker in self.INVARIANT_ERRORS)]

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.returncode is None or self.survivors():
            self.kill()  # cleanup only: a test that cares checks survivors() or the code first
        LIVE.discard(self)
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        broken = self.invariant_errors()
        assert not broken, "server broke an invariant:\n" + "\n".join(broken)
