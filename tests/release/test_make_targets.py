"""What the Makefile's targets install, read from `make -n` (the commands it would run on a clean
checkout): `make serve` the runtime only, with pip's progress shown; `make test` the dev extras;
`make install` a venv of its own outside the checkout and the command on PATH."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(target: str, tmp_path: Path, **variables: str) -> list[str]:
    """The commands `make TARGET` runs where nothing is built yet (a venv path that does not exist)."""
    assignments = [f"VENV={tmp_path / 'venv'}", *(f"{k}={v}" for k, v in variables.items())]
    done = subprocess.run(["make", "-n", "-C", str(REPO), target, *assignments], capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def installs(lines: list[str]) -> list[str]:
    return [line for line in lines if re.search(r"pip install .*-e ", line) or re.search(r"pip install .*['\"]?\.(\[\w+\])?['\"]?$", line)]


def test_make_serve_installs_the_runtime_only_and_shows_progress(tmp_path: Path) -> None:
    lines = dry_run("serve", tmp_path)
    project = installs(lines)
    assert project, lines
    assert all("[dev]" not in line for line in project), project
    assert not any("pip install" in line and " -q" in line for line in lines), lines


def test_make_test_installs_the_dev_extras(tmp_path: Path) -> None:
    project = installs(dry_run("test", tmp_path))
    assert any("[dev]" in line for line in project), project


def test_make_install_puts_a_venv_in_the_user_data_dir_and_a_shim_on_path(tmp_path: Path) -> None:
    data, bin_dir = tmp_path / "share", tmp_path / "bin"
    text = "\n".join(dry_run("install", tmp_path, INSTALL_VENV=str(data / "cursor-byok" / "venv"), INSTALL_BIN=str(bin_dir)))
    assert f"-m venv {data / 'cursor-byok' / 'venv'}" in text
    assert re.search(rf"{re.escape(str(data / 'cursor-byok' / 'venv'))}/bin/pip install [^\n]*\.", text), text
    assert f"ln -sf {data / 'cursor-byok' / 'venv'}/bin/cursor-byok {bin_dir}/cursor-byok" in text


def test_the_readme_keeps_two_set_up_commands() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make serve", "make test"]
    for heading in ("## Update", "## Uninstall"):
        assert heading in readme
