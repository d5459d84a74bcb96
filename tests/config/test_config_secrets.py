"""A model's key from the secrets file: read again whenever the file changed, however quickly."""
from __future__ import annotations

import os
import time
from pathlib import Path

from cursor_byok.config import parse, resolve_api_key


def config_with_secrets(secrets: Path):  # type: ignore[no-untyped-def]
    cfg = parse(
        {
            "secrets_file": str(secrets),
            "models": [{"id": "m", "provider": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "model": "x", "api_key_secret": "key"}],
        },
        "test.toml",
    )
    return cfg, cfg.models[0]


def write_secret(path: Path, value: str, *, age_seconds: float = 0.0) -> None:
    path.write_text(f'key = "{value}"\n')
    path.chmod(0o600)
    if age_seconds:
        then = time.time() - age_seconds
        os.utime(path, (then, then))


def test_a_changed_secrets_file_is_read_again(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.toml"
    cfg, model = config_with_secrets(secrets)
    write_secret(secrets, "sk-first", age_seconds=60)
    assert resolve_api_key(cfg, model) == "sk-first"
    assert resolve_api_key(cfg, model) == "sk-first"
    write_secret(secrets, "sk-other", age_seconds=60)  # same size, and given the same old time
    assert resolve_api_key(cfg, model) == "sk-other"
    write_secret(secrets, "sk-third")  # at once, same size: within any file system's clock grain
    assert resolve_api_key(cfg, model) == "sk-third"
    write_secret(secrets, "sk-again")
    assert resolve_api_key(cfg, model) == "sk-again"
    replacement = tmp_path / "new.toml"
    write_secret(replacement, "sk-fifth", age_seconds=60)
    os.replace(replacement, secrets)  # an editor's save: a new file in its place
    assert resolve_api_key(cfg, model) == "sk-fifth"
