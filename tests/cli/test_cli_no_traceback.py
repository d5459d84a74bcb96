"""Each failure a new user met in the first hour, run as a real process: one line naming the cause
and the fix, exit 1 (runtime) or 2 (usage or config), and never a Python traceback."""
from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cursor_byok.store import ConversationRecord, Store
from tests.fakes import ANTHROPIC, FakeProviderServer


def cli_command() -> list[str]:
    exe = Path(sys.executable).with_name("cursor-byok")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "cursor_byok.cli"]


def run(*args: str, env: dict[str, str], **kw) -> subprocess.CompletedProcess[str]:
    kw.setdefault("stdout", subprocess.PIPE)
    return subprocess.run([*cli_command(), *args], env=env, stderr=subprocess.PIPE, text=True, timeout=90, **kw)


@pytest.fixture
def env(isolated_home: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k != "CURSOR_BYOK_CONFIG"}
    environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    return environ


def assert_one_line(done: subprocess.CompletedProcess[str], code: int, *parts: str) -> None:
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == code, done.stderr
    assert len(lines) == 1, lines
    assert lines[0].startswith("cursor-byok: ")
    for part in parts:
        assert part in lines[0], lines[0]


def test_serve_on_a_port_another_program_holds(write_config, env):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        path = write_config(server_port=port)
        done = run("serve", "--config", str(path), "--log-level", "warning", env=env)
    assert_one_line(done, 1, f"cannot listen on 127.0.0.1:{port}: the port is in use by PID {os.getpid()} (", "choose another port with --port")
    assert done.stdout == ""  # no "serving" summary for a server that never served


def test_models_test_against_a_base_url_of_another_provider_kind(write_config, env):
    with FakeProviderServer() as anthropic_like:
        anthropic_like.enqueue(ANTHROPIC.text(["hello"]))
        path = write_config(
            f'[[models]]\nid = "byok-x"\nprovider = "openai-chat"\nmodel = "m"\nbase_url = "{anthropic_like.url}/v1"\n'
        )
        done = run("models", "test", "byok-x", "--config", str(path), env=env)
    assert_one_line(
        done, 1, f"the answer from {anthropic_like.url}/v1 is not in the openai-chat format model byok-x is configured for",
        "check its `provider` kind and `base_url`",
    )


def test_export_to_a_directory_that_does_not_exist(write_config, env, tmp_path: Path):
    path = write_config()

    async def populate() -> None:
        store = await Store.open(tmp_path / "data" / "state.db")
        store.upsert_conversation(ConversationRecord("conv-1", 1, 1))
        await store.close()

    asyncio.run(populate())
    out = tmp_path / "missing-dir" / "x.json"
    done = run("conversations", "export", "conv-1", "--out", str(out), "--config", str(path), env=env)
    assert_one_line(done, 1, f"cannot write {out}: No such file or directory", f"create {out.parent} first")


@pytest.mark.parametrize("pem", [False, True], ids=["ca show", "ca show --pem"])
def test_ca_show_into_a_closed_pipe(write_config, env, pem: bool):
    path = write_config()
    assert run("ca", "init", "--config", str(path), env=env).returncode == 0
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head -2` that has already exited: the first write breaks the pipe
    try:
        done = run("ca", "show", *(["--pem"] if pem else []), "--config", str(path), env=env, stdout=write_end)
    finally:
        os.close(write_end)
    assert done.returncode == 1
    assert done.stderr == ""  # nothing to tell a reader that left; above all no BrokenPipeError


def test_a_bad_config_is_one_line_per_problem_and_exit_2(write_config, env):
    path = write_config('[upstream]\nbase_url = "not a url"\n\n[[models]]\nid = "a"\nprovider = "gemini"\nmodel = "m"\n')
    done = run("serve", "--config", str(path), env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [  # every problem: the shape's and what the rest gets wrong
        f"cursor-byok: {path}: models[0].provider: unknown provider kind 'gemini' (expected one of: openai-chat, openai-responses, anthropic)",
        f"cursor-byok: {path}: upstream.base_url: not a URL: expected http://host[:port]/… or https://host[:port]/…",
    ]
