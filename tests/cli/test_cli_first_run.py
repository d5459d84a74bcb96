"""First run: `config init` writes a commented config that validates, and `serve` with no models
says where the config is and what to run next."""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from cursor_byok.config import ProviderKind, config_path, load
from cursor_byok.cli.common import typed_command
from cursor_byok.cli.first_run import warn_if_no_models
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

KEY_VARIABLES = {
    ProviderKind.OPENAI_CHAT: "OPENAI_API_KEY",
    ProviderKind.OPENAI_RESPONSES: "OPENAI_API_KEY",
    ProviderKind.ANTHROPIC: "ANTHROPIC_API_KEY",
}


@pytest.mark.parametrize("kind", list(ProviderKind), ids=lambda k: k.value)
def test_config_init_writes_a_commented_config_that_validates(
    kind: ProviderKind, run_cli: Callable, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run_cli("config", "init", "--provider", kind.value)
    path = isolated_home / ".config" / "cursor-byok" / "config.toml"
    assert result.code == 0, result.err
    assert result.out.splitlines()[0] == f"wrote {path} ({kind.value})"
    assert f"export {KEY_VARIABLES[kind]}=" in result.out and "cursor-byok serve" in result.out
    text = path.read_text()
    assert sum(line.lstrip().startswith("#") for line in text.splitlines()) >= 10
    [model] = load(path).models
    assert model.provider is kind and model.api_key_env == KEY_VARIABLES[kind]
    monkeypatch.setenv(KEY_VARIABLES[kind], "sk-test")
    assert run_cli("config", "validate").code == 0


def test_config_init_defaults_to_openai_chat(run_cli: Callable, tmp_path: Path) -> None:
    target = tmp_path / "new" / "config.toml"
    assert run_cli("config", "init", "--config", str(target)).code == 0
    assert load(target).models[0].provider is ProviderKind.OPENAI_CHAT


def test_config_init_never_overwrites(run_cli: Callable, tmp_path: Path) -> None:
    target = tmp_path / "config.toml"
    target.write_text("# mine\n")
    result = run_cli("config", "init", "--config", str(target), "--provider", "anthropic")
    assert result.code == 1
    assert result.err_lines == [
        f"cursor-byok: {target.absolute()} already exists: edit it, or write a new one with `config init --config NEW_PATH`"
    ]
    assert target.read_text() == "# mine\n"


def test_serve_with_no_models_names_the_config_and_the_next_command(tmp_path: Path) -> None:
    with ServerProcess(ServerConfig(data_dir=tmp_path / "data")) as server:
        log = server.log()
    [line] = [line for line in log.splitlines() if "no models configured" in line]
    assert f"{server.config_path.absolute()} has no [[models]] table" in line
    me = typed_command()  # as the server (in this environment) would have it typed: on PATH or not
    assert f"`{me} config init`" in line and f"`{me} config import FILE`" in line


def test_serve_with_a_model_says_nothing_about_models(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path / "data", models=[ModelSpec(id="byok-x", provider="openai-chat", base_url="http://127.0.0.1:9/v1")])
    with ServerProcess(config) as server:
        pass
    assert "no models configured" not in server.log()


def test_no_config_file_at_all_is_named_too(isolated_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = isolated_home / ".config" / "cursor-byok" / "config.toml"
    with caplog.at_level(logging.WARNING, logger="cursor_byok.cli"):
        warn_if_no_models(load(), config_path(None))
    assert [r.getMessage().split(". Next:")[0] for r in caplog.records] == [f"no models configured: {path} does not exist"]
