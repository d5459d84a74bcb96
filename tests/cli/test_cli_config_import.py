"""`cursor-byok config import`: each supported format from a fixture of ours. The result validates,
keys live only in secrets.toml (0600), a second import skips everything, --dry-run writes nothing."""
from __future__ import annotations

import stat
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cursor_byok.config import load

FIXTURES = Path(__file__).parents[1] / "fixtures" / "imports"


@dataclass(frozen=True)
class Case:
    file: str
    format: str
    imported: int
    skipped: int
    stored_keys: frozenset[str]  # literal keys of imported models: only in secrets.toml
    dropped_keys: frozenset[str] = frozenset()  # keys of skipped models: written nowhere
    env: dict[str, str] = field(default_factory=dict)  # variables the imported models name

    @property
    def summary(self) -> str:
        return f"imported {self.imported}, skipped {self.skipped}, total {self.imported + self.skipped}"


CASES = [
    Case(
        "reference-app.yaml", "reference desktop app config (modelAdapters)", 3, 1,
        frozenset({"sk-ant-fixture-0001", "sk-fixture-openai-0002"}), frozenset({"sk-fixture-gemini-0003"}),
    ),
    Case(
        "litellm.yaml", "LiteLLM config (model_list)", 3, 2,
        frozenset({"sk-ant-fixture-litellm-0004"}), env={"OPENAI_API_KEY": "sk-env-openai"},
    ),
    Case(
        "claude-code-router.json", "claude-code-router config (Providers)", 3, 1,
        frozenset({"sk-or-fixture-0005"}), frozenset({"sk-gem-fixture-0006"}), {"DEEPSEEK_API_KEY": "sk-env-deepseek"},
    ),
]  # fmt: skip


@pytest.fixture
def config_dir(isolated_home: Path) -> Path:
    return isolated_home / ".config" / "cursor-byok"


def models_by_id(path: Path) -> dict[str, dict]:
    return {m["id"]: m for m in tomllib.loads(path.read_text())["models"]}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.file)
def test_import_validates_keeps_keys_in_secrets_and_skips_everything_the_second_time(
    case: Case, run_cli: Callable, config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    first = run_cli("config", "import", str(FIXTURES / case.file))
    assert first.code == 0, first.err
    assert first.out.splitlines()[0] == f"{FIXTURES / case.file}: {case.format}"
    assert case.summary in first.out.splitlines()[-1]

    config, secrets = config_dir / "config.toml", config_dir / "secrets.toml"
    text = config.read_text()
    for key in case.stored_keys | case.dropped_keys | set(case.env.values()):
        assert key not in text
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    stored = tomllib.loads(secrets.read_text())
    assert set(stored.values()) == case.stored_keys
    cfg = load(config)
    assert len(cfg.models) == case.imported
    for model in cfg.models:  # every key reference points at something that exists
        assert not model.api_key_secret or model.api_key_secret in stored
        assert not model.api_key_env or model.api_key_env in case.env
    assert run_cli("config", "validate").code == 0

    before = {p.name: p.read_bytes() for p in (config, secrets)}
    second = run_cli("config", "import", str(FIXTURES / case.file))
    assert second.code == 0, second.err
    total = case.imported + case.skipped
    assert second.out.splitlines()[-1] == f"imported 0, skipped {total}, total {total}"
    assert {p.name: p.read_bytes() for p in (config, secrets)} == before


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.file)
def test_dry_run_prints_the_toml_with_keys_masked_and_writes_nothing(case: Case, run_cli: Callable, isolated_home: Path) -> None:
    before = sorted(isolated_home.rglob("*"))
    result = run_cli("config", "import", "--dry-run", str(FIXTURES / case.file))
    assert result.code == 0, result.err
    assert sorted(isolated_home.rglob("*")) == before
    assert result.out.count("[[models]]") == case.imported
    assert "********" in result.out
    for key in case.stored_keys | case.dropped_keys:
        assert key not in result.out
    assert f"{case.summary} (dry run: nothing written)" in result.out.splitlines()


def test_reference_app_settings_map_to_config_keys_and_the_rest_is_reported(run_cli: Callable, config_dir: Path) -> None:
    result = run_cli("config", "import", str(FIXTURES / "reference-app.yaml"))
    models = models_by_id(config_dir / "config.toml")
    sonnet, gpt, local = models["sonnet-via-anthropic"], models["gpt-responses"], models["local-chat"]
    assert sonnet["provider"] == "anthropic" and sonnet["model"] == "claude-sonnet-4-5"
    assert (sonnet["context_window"], sonnet["max_output_tokens"], sonnet["thinking_budget_tokens"]) == (200000, 32000, 4000)
    assert sonnet["extra_headers"] == {"anthropic-beta": "context-1m-2025-08-07"}
    assert sonnet["extra_params"] == {"top_k": 20}
    # The endpoint URL names the protocol; 0 means unset (the default context window applies).
    assert gpt["provider"] == "openai-responses" and gpt["base_url"] == "https://api.openai.com/v1/responses"
    assert gpt["default_effort"] == "high" and gpt["max_output_tokens"] == 64000 and "context_window" not in gpt
    assert gpt["extra_headers"] == {"X-Team": "tools"} and gpt["extra_params"] == {"service_tier": "flex"}
    assert local["provider"] == "openai-chat" and "api_key_secret" not in local and "api_key_env" not in local
    out = result.out
    assert "header 'X-Trace' is not a fixed text value: not imported" in out
    assert "'store' is or holds null (TOML cannot express it): not imported" in out
    assert "thinkingBudgetTokens not imported" in out
    assert "skipped  gemini-direct: modelAdapters[3]: type 'gemini' is not openai or anthropic" in out


def test_litellm_prefixes_env_keys_and_unsupported_routes(run_cli: Callable, config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-openai")
    result = run_cli("config", "import", str(FIXTURES / "litellm.yaml"))
    models = models_by_id(config_dir / "config.toml")
    assert models["gpt-4o"]["api_key_env"] == "OPENAI_API_KEY" and models["gpt-4o"]["extra_params"] == {"temperature": 0.2}
    claude = models["claude-sonnet"]
    assert claude["provider"] == "anthropic" and claude["display_name"] == "claude sonnet"
    assert (claude["context_window"], claude["max_output_tokens"]) == (200000, 16000)
    assert claude["extra_headers"] == {"anthropic-beta": "context-1m-2025-08-07"}
    assert models["local-qwen"]["base_url"] == "http://127.0.0.1:11434/v1"  # Ollama's OpenAI-compatible path
    assert "litellm_params.rpm not imported" in result.out
    assert "skipped  gpt-4o: same model id earlier in the file" in result.out
    assert "skipped  bedrock-claude: model_list[4]: provider 'bedrock' is not supported" in result.out


def test_claude_code_router_providers_share_one_secret_per_key(run_cli: Callable, config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-env-deepseek")
    result = run_cli("config", "import", str(FIXTURES / "claude-code-router.json"))
    models = models_by_id(config_dir / "config.toml")
    routed = [models["openrouter-anthropic-claude-sonnet-4.5"], models["openrouter-openai-gpt-5"]]
    assert {m["api_key_secret"] for m in routed} == {"openrouter"}
    assert {m["model"] for m in routed} == {"anthropic/claude-sonnet-4.5", "openai/gpt-5"}
    assert models["deepseek-deepseek-chat"]["api_key_env"] == "DEEPSEEK_API_KEY"
    assert tomllib.loads((config_dir / "secrets.toml").read_text()) == {"openrouter": "sk-or-fixture-0005"}
    assert "transformer not imported" in result.out
    assert "the Gemini API is not supported" in result.out


def test_existing_models_text_and_secrets_are_kept(run_cli: Callable, config_dir: Path) -> None:
    config_dir.mkdir(parents=True)
    config = config_dir / "config.toml"
    original = '# my own notes\n[server]\nport = 9999\n\n[[models]]\nid = "claude-sonnet"\nprovider = "anthropic"\nmodel = "mine"\n'
    config.write_text(original)
    secrets = config_dir / "secrets.toml"
    secrets.write_text('local-qwen = "sk-someone-else"\n')
    secrets.chmod(0o600)
    result = run_cli("config", "import", str(FIXTURES / "litellm.yaml"))
    assert result.code == 0, result.err
    assert "skipped  claude-sonnet: model id already configured" in result.out
    text = config.read_text()
    assert text.startswith(original)
    assert models_by_id(config)["claude-sonnet"]["model"] == "mine"
    assert tomllib.loads(secrets.read_text())["local-qwen"] == "sk-someone-else"


def test_short_models_still_become_model_tables_after_the_configs_own_tables(run_cli: Callable, config_dir: Path, tmp_path: Path) -> None:
    config_dir.mkdir(parents=True)
    config = config_dir / "config.toml"
    config.write_text("[proxy]\nport = 8788\n")
    source = tmp_path / "short.yaml"
    source.write_text("model_list:\n  - model_name: a\n    litellm_params: {model: openai/a}\n")
    assert run_cli("config", "import", str(source)).code == 0
    assert config.read_text().endswith("[[models]]\nid = \"a\"\nprovider = \"openai-chat\"\nbase_url = \"https://api.openai.com/v1\"\nmodel = \"a\"\n")
    assert [m.id for m in load(config).models] == ["a"]


def test_a_config_with_an_inline_models_array_is_left_alone(run_cli: Callable, config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-openai")
    config_dir.mkdir(parents=True)
    config = config_dir / "config.toml"
    original = 'models = [{ id = "mine", provider = "anthropic", model = "m" }]\n'
    config.write_text(original)
    result = run_cli("config", "import", str(FIXTURES / "litellm.yaml"))
    assert result.code == 2 and len(result.err_lines) == 1
    assert result.err_lines[0].startswith(f"cursor-byok: {config}: new [[models]] tables cannot be appended to this file (")
    assert result.err_lines[0].endswith("): add them by hand")
    assert config.read_text() == original and not (config_dir / "secrets.toml").exists()


def test_a_taken_secret_name_gets_a_new_one(run_cli: Callable, config_dir: Path) -> None:
    config_dir.mkdir(parents=True)
    secrets = config_dir / "secrets.toml"
    secrets.write_text('claude-sonnet = "sk-another-key"')  # no final newline: the import adds its own line
    secrets.chmod(0o600)
    assert run_cli("config", "import", str(FIXTURES / "litellm.yaml")).code == 0
    assert tomllib.loads(secrets.read_text()) == {"claude-sonnet": "sk-another-key", "claude-sonnet-2": "sk-ant-fixture-litellm-0004"}
    assert models_by_id(config_dir / "config.toml")["claude-sonnet"]["api_key_secret"] == "claude-sonnet-2"


def test_a_secrets_file_that_cannot_take_the_new_keys_is_left_alone(run_cli: Callable, config_dir: Path) -> None:
    config_dir.mkdir(parents=True)
    secrets = config_dir / "secrets.toml"
    # The loader reads top-level keys only; an appended key would land inside this table.
    original = '[claude-sonnet]\nnote = "a table, not a key"\n'
    secrets.write_text(original)
    secrets.chmod(0o600)
    result = run_cli("config", "import", str(FIXTURES / "litellm.yaml"))
    assert result.code == 2
    assert result.err_lines == [f"cursor-byok: {secrets}: new keys cannot be appended to this file: add them by hand"]
    assert secrets.read_text() == original and not (config_dir / "config.toml").exists()


def test_a_secrets_file_others_can_read_stops_the_import_before_anything_is_written(run_cli: Callable, config_dir: Path) -> None:
    config_dir.mkdir(parents=True)
    secrets = config_dir / "secrets.toml"
    secrets.write_text("")
    secrets.chmod(0o644)
    result = run_cli("config", "import", str(FIXTURES / "reference-app.yaml"))
    assert result.code == 2
    config = config_dir / "config.toml"
    assert result.err_lines == [f"cursor-byok: {config}: secrets_file: {secrets}: permissions must be 0600 (run: chmod 600 {secrets})"]
    assert not config.exists() and secrets.read_text() == ""


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("other.yaml", "foo: 1\n", "not a known format (expected modelAdapters, model_list or Providers at the top level)"),
        ("broken.yaml", "model_list: [\n", "not valid YAML: "),
        ("broken.json", '{"Providers": [}', "not valid JSON: "),
        ("list.yaml", "model_list: 3\n", "model_list is not a list"),
    ],
)
def test_a_file_that_is_not_a_known_config_is_one_line(run_cli: Callable, tmp_path: Path, name: str, content: str, problem: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    result = run_cli("config", "import", str(path))
    assert result.code == 2 and result.out == ""
    assert len(result.err_lines) == 1 and result.err_lines[0].startswith(f"cursor-byok: {path}: {problem}")


def test_missing_file_is_one_line(run_cli: Callable, tmp_path: Path) -> None:
    result = run_cli("config", "import", str(tmp_path / "nope.yaml"))
    assert result.code == 2
    assert result.err_lines == [f"cursor-byok: {tmp_path / 'nope.yaml'}: cannot read: No such file or directory"]


def test_import_into_an_explicit_new_config_path(run_cli: Callable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-openai")
    target = tmp_path / "elsewhere" / "config.toml"
    result = run_cli("config", "import", "--config", str(target), str(FIXTURES / "litellm.yaml"))
    assert result.code == 0, result.err
    assert set(models_by_id(target)) == {"gpt-4o", "claude-sonnet", "local-qwen"}
