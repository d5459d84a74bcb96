"""`config path|validate`, and the one-line error every command gives for a bad config."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MODEL = """
[[models]]
id = "byok-sonnet"
provider = "anthropic"
base_url = "http://127.0.0.1:9"
model = "claude-sonnet-4-5"
api_key_env = "CLI_TEST_ANTHROPIC_KEY"
context_window = 200000
"""


def test_config_path_follows_flag_env_and_default(run_cli, tmp_path: Path, isolated_home: Path, monkeypatch):
    assert run_cli("config", "path").out.strip() == str(isolated_home / ".config" / "cursor-byok" / "config.toml")
    monkeypatch.setenv("CURSOR_BYOK_CONFIG", str(tmp_path / "env.toml"))
    assert run_cli("config", "path").out.strip() == str(tmp_path / "env.toml")
    assert run_cli("config", "path", "--config", str(tmp_path / "flag.toml")).out.strip() == str(tmp_path / "flag.toml")


def test_validate_accepts_a_good_config(run_cli, write_config, monkeypatch):
    path = write_config(MODEL)
    monkeypatch.setenv("CLI_TEST_ANTHROPIC_KEY", "sk-test-secret")
    result = run_cli("config", "validate", "--config", str(path))
    assert (result.code, result.out.strip(), result.err) == (0, f"ok: {path}", "")
    # the global position of --config works too, and so does the environment variable
    assert run_cli("--config", str(path), "config", "validate").code == 0
    monkeypatch.setenv("CURSOR_BYOK_CONFIG", str(path))
    assert run_cli("config", "validate").out.strip() == f"ok: {path}"


BAD_CONFIGS = {
    "missing required key": (MODEL.replace('model = "claude-sonnet-4-5"\n', ""), "models[0].model: missing required key"),
    "wrong type": (MODEL.replace("context_window = 200000", 'context_window = "big"'), "models[0].context_window: expected integer, got string"),
    "unknown provider kind": (MODEL.replace('provider = "anthropic"', 'provider = "gemini"'), "models[0].provider: unknown provider kind 'gemini'"),
    "unknown key": (MODEL + "temperature = 0.2\n", "models[0].temperature: unknown key"),
    "unknown table": ("[bogus]\nx = 1\n", "bogus: unknown key"),
    "duplicate model id": (MODEL + MODEL, "models[1].id: duplicate model id 'byok-sonnet'"),
    "invalid toml": ("[[models]\n", "invalid TOML"),
    "alias to no model": (MODEL + '[[aliases]]\ncursor_model = "gpt-5"\nmodel = "byok-opus"\n', "aliases[0].model: no [[models]] entry has id 'byok-opus' (model ids: byok-sonnet)"),
    "alias of an own id": (MODEL + '[[aliases]]\ncursor_model = "byok-sonnet"\nmodel = "byok-sonnet"\n', "aliases[0].cursor_model: 'byok-sonnet' is one of your own model ids already"),
    "alias twice": (MODEL + '[[aliases]]\ncursor_model = "gpt-5"\nmodel = "byok-sonnet"\n' * 2, "aliases[1].cursor_model: 'gpt-5' is aliased twice"),
    "alias without a hosted id": (MODEL + '[[aliases]]\nmodel = "byok-sonnet"\n', "aliases[0].cursor_model: missing required key"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_validate_rejects_with_one_line_naming_the_key(run_cli, write_config, monkeypatch, case):
    body, problem = BAD_CONFIGS[case]
    path = write_config(body)
    monkeypatch.setenv("CLI_TEST_ANTHROPIC_KEY", "sk-test-secret")
    result = run_cli("config", "validate", "--config", str(path))
    assert result.code == 2
    assert result.out == ""
    [line] = result.err_lines
    assert line.startswith(f"cursor-byok: {path}: ")
    assert problem in line


def test_missing_env_key_is_a_config_error(run_cli, write_config, monkeypatch):
    monkeypatch.delenv("CLI_TEST_ANTHROPIC_KEY", raising=False)
    path = write_config(MODEL)
    result = run_cli("config", "validate", "--config", str(path))
    assert result.code == 2
    assert result.err_lines == [
        f"cursor-byok: {path}: models[0].api_key_env: environment variable CLI_TEST_ANTHROPIC_KEY is not set (model 'byok-sonnet')"
    ]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_secrets_file_must_exist_and_be_private(run_cli, write_config, tmp_path: Path):
    secrets = tmp_path / "secrets.toml"
    body = MODEL.replace('api_key_env = "CLI_TEST_ANTHROPIC_KEY"', 'api_key_secret = "anthropic"')
    path = write_config(body, top=f'secrets_file = "{secrets}"\n')
    result = run_cli("config", "validate", "--config", str(path))
    assert result.code == 2 and len(result.err_lines) == 1
    assert f"{path}: secrets_file: {secrets}: cannot read" in result.err

    secrets.write_text('anthropic = "sk-from-file"\n')
    secrets.chmod(0o644)
    result = run_cli("config", "validate", "--config", str(path))
    assert result.code == 2 and len(result.err_lines) == 1
    assert "permissions must be 0600" in result.err and "sk-from-file" not in result.err

    secrets.chmod(0o600)
    assert run_cli("config", "validate", "--config", str(path)).code == 0
    secrets.write_text('other = "x"\n')
    result = run_cli("config", "validate", "--config", str(path))
    assert result.code == 2 and "models[0].api_key_secret: 'anthropic' not in the secrets file" in result.err


def test_missing_config_file(run_cli, tmp_path: Path):
    result = run_cli("config", "validate", "--config", str(tmp_path / "nope.toml"))
    assert result.code == 2
    assert result.err_lines == [f"cursor-byok: {tmp_path / 'nope.toml'}: config file not found"]


@pytest.mark.parametrize("command", [["models", "list"], ["ca", "init"], ["cursor", "status"], ["conversations", "list"], ["doctor"]])
def test_every_command_refuses_a_bad_config_the_same_way(run_cli, write_config, command):
    path = write_config("[upstream]\nbase_url = 42\n")
    result = run_cli(*command, "--config", str(path))
    assert result.code == 2
    assert result.err_lines == [f"cursor-byok: {path}: upstream.base_url: expected string, got integer"]


def test_a_real_process_prints_one_line_and_no_traceback(write_config, tmp_path: Path):
    path = write_config('[upstream]\nbase_url = 42\n')
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    env.pop("CURSOR_BYOK_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "cursor_byok.cli", "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"cursor-byok: {path}: upstream.base_url: expected string, got integer"]


def test_validate_reports_every_problem_one_line_each(run_cli, write_config, tmp_path: Path, monkeypatch):
    pasted = "sk-proj-Abc123def456ghi789jkl012mno345"
    monkeypatch.delenv("CLI_TEST_MISSING_A", raising=False)
    body = (
        '[upstream]\nbase_url = "api2.cursor.sh"\n\n'
        '[[models]]\nid = "a"\nprovider = "openai-chat"\nmodel = "m"\nbase_url = "not a url"\n'
        f'api_key_env = "{pasted}"\n'
        'efforts = ["low", "high"]\ndefault_effort = "max"\n\n'
        '[[models]]\nid = "b"\nprovider = "anthropic"\nmodel = "m"\ncontext_window = "big"\ntemperature = 1\n'
    )
    path = write_config(body, server_port=18123, proxy_port=18123)
    result = run_cli("config", "validate", "--config", str(path))
    assert result.code == 2 and result.out == ""
    problems = [line.removeprefix(f"cursor-byok: {path}: ") for line in result.err_lines]
    meaning = [
        "models[0].api_key_env: this looks like an API key, not the name of an environment variable: "
        "put the key in the environment (export NAME=...) and write NAME here",
        "models[0].base_url: not a URL: expected http://host[:port]/… or https://host[:port]/…",
        "models[0].default_effort: 'max' is not one of its efforts (low, high)",
        "upstream.base_url: not a URL: expected http://host[:port]/… or https://host[:port]/…",
        "proxy.port: 18123 is also server.port: give the proxy another port",
    ]
    # the shape first, then what the rest still gets wrong: all of it in one pass
    assert problems == ["models[1].context_window: expected integer, got string", "models[1].temperature: unknown key", *meaning]
    path.write_text(path.read_text().replace('context_window = "big"\ntemperature = 1\n', ""))
    result = run_cli("config", "validate", "--config", str(path))
    problems = [line.removeprefix(f"cursor-byok: {path}: ") for line in result.err_lines]
    assert result.code == 2
    assert problems == meaning
    assert pasted not in result.out + result.err
    # every command refuses the same file with the same lines
    assert run_cli("models", "list", "--config", str(path)).err_lines == result.err_lines


def test_validate_reports_every_missing_key(run_cli, write_config, monkeypatch):
    monkeypatch.delenv("CLI_TEST_KEY_ONE", raising=False)
    monkeypatch.delenv("CLI_TEST_KEY_TWO", raising=False)
    path = write_config(
        MODEL.replace("CLI_TEST_ANTHROPIC_KEY", "CLI_TEST_KEY_ONE")
        + MODEL.replace("byok-sonnet", "byok-two").replace("CLI_TEST_ANTHROPIC_KEY", "CLI_TEST_KEY_TWO")
    )
    result = run_cli("config", "validate", "--config", str(path))
    assert result.code == 2
    assert [line.split(": ", 2)[2] for line in result.err_lines] == [
        "models[0].api_key_env: environment variable CLI_TEST_KEY_ONE is not set (model 'byok-sonnet')",
        "models[1].api_key_env: environment variable CLI_TEST_KEY_TWO is not set (model 'byok-two')",
    ]
