"""CLI test fixtures: an isolated home (no real config, settings or trust store touched) and a runner."""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cursor_byok import cli
from tests.harness.server import free_ports


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.delenv("CURSOR_BYOK_CONFIG", raising=False)
    root = logging.getLogger()
    level = root.level
    yield home
    for handler in list(root.handlers):
        if getattr(handler, "_cursor_byok", False):
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            code = cli.main(list(args))
        except SystemExit as exc:  # argparse's usage errors
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """Write a config whose data dir and ports are private to this test."""

    def write(
        body: str = "",
        *,
        top: str = "",
        name: str = "config.toml",
        server_port: int | None = None,
        proxy_port: int | None = None,
    ) -> Path:
        data_dir = tmp_path / "data"
        fresh = iter(p for p in free_ports(3) if p not in (server_port, proxy_port))
        head = top + (
            f'[server]\nport = {server_port or next(fresh)}\ndata_dir = "{data_dir}"\n\n'
            f"[proxy]\nport = {proxy_port or next(fresh)}\n\n"
        )
        path = tmp_path / name
        path.write_text(head + body, encoding="utf-8")
        return path

    return write
