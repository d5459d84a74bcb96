"""Issue #34, the first hour: what a new user meets in the CLI, each through `cursor-byok` itself."""
from __future__ import annotations

import argparse
import logging
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cursor_byok import cli

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "imports"


def cursor_byok(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The installed command in a real process (exit code, stdout and stderr as a user sees them)."""
    exe = Path(sys.executable).with_name("cursor-byok")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=env)


# -- help, completion, verbose ----------------------------------------------------------------------


def test_no_arguments_prints_the_help_not_an_error():
    done = cursor_byok()
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: cursor-byok")
    assert "serve" in done.stdout and "doctor" in done.stdout
    assert done.stderr == ""


def _parsers(parser: argparse.ArgumentParser, name: str = "cursor-byok") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_every_flag_of_every_command_has_help_text():
    missing = [
        f"{name} {'/'.join(action.option_strings) or action.dest}"
        for name, parser in _parsers(cli.build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction) and (not action.help or action.help == argparse.SUPPRESS)
    ]
    assert missing == []


def test_serve_help_explains_host_port_data_dir_and_proxy_port():
    done = cursor_byok("serve", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for flag, words in (
        ("--host HOST", "address to listen on"),
        ("--port PORT", "port to listen on"),
        ("--data-dir DIR", "where the database"),
        ("--proxy-port N", "port of the intercepting proxy"),
    ):
        assert f"{flag} {words}" in text, text


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_for_each_shell(shell: str, run_cli):
    result = run_cli("completion", shell)
    assert result.code == 0, result.err
    assert "cursor-byok" in result.out
    for command in ("serve", "doctor", "config", "completion"):
        assert command in result.out
    if shell == "bash" and shutil.which("bash"):
        check = subprocess.run(["bash", "-n"], input=result.out, capture_output=True, text=True)
        assert check.returncode == 0, check.stderr


def test_bash_completion_completes_subcommands(run_cli):
    script = run_cli("completion", "bash").out
    probe = (
        script
        + "\nCOMP_WORDS=(cursor-byok se); COMP_CWORD=1; COMP_LINE='cursor-byok se'; COMP_POINT=${#COMP_LINE}\n"
        + "$(complete -p cursor-byok | sed -E 's/.* -F ([^ ]+) .*/\\1/') cursor-byok se cursor-byok\n"
        + 'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True)
    assert "serve" in done.stdout.split(), done.stdout + done.stderr


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_is_log_level_debug(where: str, run_cli, write_config):
    path = write_config()
    args = ["config", "validate", "--config", str(path)]
    args = ["-v", *args] if where == "before" else [*args, "--verbose"]
    result = run_cli(*args)
    assert result.code == 0, result.err
    assert logging.getLogger().level == logging.DEBUG


# -- config: every problem in one pass --------------------------------------------------------------

MANY_PROBLEMS = """
[server]
port = "eighty"
hots = "127.0.0.1"

[upstream]
base_url = "not a url"

[[models]]
id = "a"
provider = "openai-chat"
model = "m"
contxt_window = 1000
base_url = "ftp://example.com"

[[models]]
id = "a"
provider = "openai-chatt"
model = "m"
"""


def test_validate_reports_every_kind_of_problem_at_once_with_did_you_mean(run_cli, tmp_path: Path):
    path = tmp_path / "config.toml"
    path.write_text(MANY_PROBLEMS)
    result = run_cli("config", "validate", "--config", str(path))
    assert result.code == 2
    lines = [line.removeprefix(f"cursor-byok: {path}: ") for line in result.err_lines]
    assert any(line.startswith("server.port: expected integer") for line in lines), lines
    assert "server.hots: unknown key (did you mean host?)" in lines
    assert "models[0].contxt_window: unknown key (did you mean context_window?)" in lines
    assert any(line.startswith("models[1].provider: unknown provider kind") and "did you mean openai-chat?" in line for line in lines), lines
    # what a well-formed part can still get wrong is reported in the same pass
    assert any(line.startswith("upstream.base_url: not a URL") for line in lines), lines
    assert any(line.startswith("models[0].base_url: not a URL") for line in lines), lines
    assert "models[1].id: duplicate model id 'a'" in lines
    assert len(lines) == len(set(lines)) == 7, lines


def test_every_command_that_loads_the_config_reports_all_problems(run_cli, tmp_path: Path):
    path = tmp_path / "config.toml"
    path.write_text(MANY_PROBLEMS)
    validate = run_cli("config", "validate", "--config", str(path))
    listing = run_cli("models", "list", "--config", str(path))
    assert listing.code == 2
    assert listing.err_lines == validate.err_lines


@pytest.mark.parametrize(
    ("encoding", "words"),
    [("utf-16", "UTF-16"), ("utf-32", "UTF-32"), ("latin-1", "not UTF-8")],
)
def test_a_config_that_is_not_utf8_is_an_ordinary_config_error(encoding: str, words: str, tmp_path: Path):
    path = tmp_path / "config.toml"
    path.write_bytes('[server]\nport = 8787\n# café\n'.encode(encoding))
    done = cursor_byok("config", "validate", "--config", str(path))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"cursor-byok: {path}: ") and words in lines[0] and "UTF-8" in lines[0]
    assert "bug" not in lines[0]


def test_a_utf8_byte_order_mark_is_read_as_utf8(run_cli, tmp_path: Path):
    path = tmp_path / "config.toml"
    path.write_bytes(b"\xef\xbb\xbf[server]\nport = 8787\n")
    result = run_cli("config", "validate", "--config", str(path))
    assert result.code == 0, result.err


# -- models test: bounded ---------------------------------------------------------------------------


@pytest.fixture
def stalled_endpoint() -> Iterator[str]:
    """A local socket that accepts every connection and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def test_models_test_on_a_stalled_endpoint_ends_within_its_timeout_printing_each_retry(stalled_endpoint: str, write_config, tmp_path: Path):
    path = write_config(f'[[models]]\nid = "stalled"\nprovider = "openai-chat"\nbase_url = "{stalled_endpoint}"\nmodel = "m"\n')
    # 6 s: three tries of 1.5 s and the pauses between them (0.5 s, 1 s) fit in it
    done = cursor_byok("models", "test", "stalled", "--timeout", "6", "--config", str(path), timeout=60)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    retries = [line for line in lines if "retry" in line]
    assert len(retries) == 2, lines
    assert all(line.startswith("cursor-byok: ") for line in retries), retries
    assert "within 6 s (3 tries)" in lines[-1] and "stalled" in lines[-1], lines
    assert "openai-chat: openai-chat" not in done.stderr


def test_models_test_default_budget_is_15_seconds():
    done = cursor_byok("models", "test", "--help")
    assert "--timeout SECONDS" in done.stdout
    assert "default: 15" in " ".join(done.stdout.split())


# -- ports: the holder is named, nothing is created first -------------------------------------------


@pytest.fixture
def http_server() -> Iterator[tuple[int, int]]:
    """`python -m http.server` on a free loopback port: (port, pid), once it says it serves."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N ...": it listens
    assert "Serving HTTP" in first, first
    yield port, proc.pid
    proc.terminate()
    proc.wait(10)


def test_busy_server_port_names_the_holder_and_creates_no_data_dir(http_server, write_config, tmp_path: Path):
    port, pid = http_server
    new_dir = tmp_path / "new-data"
    path = write_config(server_port=port)
    done = cursor_byok("serve", "--config", str(path), "--data-dir", str(new_dir), timeout=60)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert f"PID {pid}" in last and "http.server" in last, last
    assert not new_dir.exists()


def test_busy_proxy_port_names_the_holder_and_creates_no_ca(http_server, write_config, tmp_path: Path):
    port, pid = http_server
    new_dir = tmp_path / "new-data"
    path = write_config(proxy_port=port)
    done = cursor_byok("serve", "--proxy", "--config", str(path), "--data-dir", str(new_dir), timeout=60)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("cursor-byok: proxy cannot listen on"), last
    assert f"PID {pid}" in last and "http.server" in last, last
    assert "another cursor-byok" not in last and "Errno" not in last
    assert not (new_dir / "ca").exists() and not new_dir.exists()


def test_doctor_names_the_program_on_a_busy_port(http_server, write_config):
    port, pid = http_server
    path = write_config(server_port=port)
    done = cursor_byok("doctor", "--config", str(path))
    line = next(line for line in done.stdout.splitlines() if "server port" in line)
    assert f"PID {pid}" in line and "http.server" in line, line


# -- service ----------------------------------------------------------------------------------------


@pytest.fixture
def no_systemd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH without systemctl (a container, WSL without systemd)."""
    bin_dir = tmp_path / "bin-without-systemd"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))


def _unit(home: Path) -> Path:
    return home / ".config" / "systemd" / "user" / "cursor-byok.service"


def test_service_uninstall_force_removes_the_unit_without_systemd(run_cli, write_config, isolated_home: Path, no_systemd):
    path = write_config()
    unit = _unit(isolated_home)
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\nExecStart=/x\n")
    refused = run_cli("service", "uninstall", "--config", str(path))
    assert refused.code == 1 and "--force" in refused.err
    assert unit.exists()
    forced = run_cli("service", "uninstall", "--force", "--config", str(path))
    assert forced.code == 0, forced.err
    assert not unit.exists()
    assert f"removed {unit}" in forced.out


def test_a_unit_running_a_command_inside_a_source_checkout_warns(run_cli, write_config):
    result = run_cli("service", "install", "--dry-run", "--platform", "linux", "--config", str(write_config()))
    assert result.code == 0, result.err
    assert REPO / ".venv" in Path(sys.executable).parents  # this suite runs from the checkout's venv
    warning = next(line for line in result.out.splitlines() + result.err.splitlines() if "source checkout" in line)
    assert "make clean" in warning and "make install" in warning


def test_service_install_says_where_the_logs_are(run_cli, write_config):
    result = run_cli("service", "install", "--dry-run", "--platform", "linux", "--config", str(write_config()))
    assert "journalctl --user -u cursor-byok" in result.out


def test_source_checkout_detection():
    from cursor_byok.cli.service import source_checkout

    assert source_checkout(REPO / ".venv" / "bin" / "cursor-byok") == REPO
    assert source_checkout(Path("/usr/local/bin/cursor-byok")) is None


# -- import -----------------------------------------------------------------------------------------


def test_import_notes_the_claude_code_router_router_it_skips(run_cli, tmp_path: Path):
    target = tmp_path / "config.toml"
    result = run_cli("config", "import", str(FIXTURES / "claude-code-router.json"), "--dry-run", "--config", str(target))
    assert result.code == 0, result.err
    assert any(line.startswith("note: Router not imported") for line in result.out.splitlines()), result.out


def test_import_says_which_key_variables_to_set(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("AZURE_API_KEY", raising=False)
    target = tmp_path / "config.toml"
    result = run_cli("config", "import", str(FIXTURES / "litellm.yaml"), "--config", str(target))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    hint = [line for line in lines if line.startswith("next: export")]
    assert hint and "OPENAI_API_KEY" in hint[0], lines
    assert "AZURE_API_KEY" not in hint[0]  # its model was skipped (the same id twice)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-set")
    again = run_cli("config", "import", str(FIXTURES / "litellm.yaml"), "--dry-run", "--config", str(tmp_path / "other.toml"))
    assert not any(line.startswith("next: export") for line in again.out.splitlines())


# -- the banner -------------------------------------------------------------------------------------


def test_banner_names_the_command_the_dashboard_and_the_metrics(write_config, tmp_path: Path):
    from cursor_byok.cli import startup
    from cursor_byok.config import load

    cfg = load(write_config())
    lines = startup.summary(cfg, {"PATH": "/nowhere"})
    text = "\n".join(lines)
    base = f"http://127.0.0.1:{cfg.server.port}"
    assert f"dashboard: {base}/ui/" in text
    assert f"metrics: {base}/metrics" in text
    command = next(line for line in lines if line.strip().startswith("command:"))
    assert str(Path(sys.executable).with_name("cursor-byok")) in command
    assert "make install" in command  # not on PATH: how to put it there
    nxt = next(line for line in lines if line.strip().startswith("next:"))
    assert str(Path(sys.executable).with_name("cursor-byok")) in nxt


def test_banner_uses_the_bare_command_when_it_is_on_path(write_config):
    from cursor_byok.cli import startup
    from cursor_byok.config import load

    cfg = load(write_config())
    lines = startup.summary(cfg, {"PATH": str(Path(sys.executable).parent)})
    command = next(line for line in lines if line.strip().startswith("command:"))
    assert "on PATH" in command
    assert "`cursor-byok doctor`" in next(line for line in lines if line.strip().startswith("next:"))



# -- the walkthrough's stand-in provider ------------------------------------------------------------


def test_models_test_against_the_stand_in_provider_of_the_walkthrough(write_config):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stand_in = subprocess.Popen(
        [sys.executable, "-u", str(REPO / "scripts" / "stand_in_provider.py"), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        assert stand_in.stdout is not None
        assert "stand-in provider" in stand_in.stdout.readline()  # it listens
        path = write_config(f'[[models]]\nid = "local"\nprovider = "openai-chat"\nbase_url = "http://127.0.0.1:{port}/v1"\nmodel = "stand-in"\n')
        done = cursor_byok("models", "test", "local", "--prompt", "ping", "--config", str(path))
    finally:
        stand_in.terminate()
        stand_in.wait(10)
    assert done.returncode == 0, done.stderr
    assert "Hello from the stand-in provider. You said: ping" in done.stdout
