"""`make wheels` finds its interpreters in $PYTHONS, else on PATH and in pyenv's versions: one per
supported minor version, and nothing that does not run or is not CPython 3.11-3.13."""
from __future__ import annotations

import sys
from pathlib import Path

from scripts import wheels

CURRENT = (sys.version_info[0], sys.version_info[1])


def link(target: str, at: Path) -> str:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(target)
    return str(at)


def broken_shim(at: Path) -> str:
    """Like a pyenv shim for a version that is not selected: it exists and fails."""
    at.parent.mkdir(parents=True, exist_ok=True)
    at.write_text("#!/bin/sh\necho 'pyenv: version not selected' >&2\nexit 127\n")
    at.chmod(0o755)
    return str(at)


def test_pythons_names_exactly_the_interpreters_to_use(tmp_path: Path) -> None:
    shim = broken_shim(tmp_path / "python3.12")
    found = wheels.find_interpreters({"PYTHONS": f"{sys.executable} {shim} {tmp_path / 'missing'} /bin/true", "PATH": ""})
    assert [i.version for i in found] == [CURRENT]
    assert found[0].tag == f"cp{CURRENT[0]}{CURRENT[1]}"


def test_path_and_pyenv_are_searched_and_one_per_version_is_kept(tmp_path: Path) -> None:
    minor = f"python{CURRENT[0]}.{CURRENT[1]}"
    on_path = link(sys.executable, tmp_path / "bin" / minor)
    other = "python3.13" if CURRENT != (3, 13) else "python3.12"
    shim = broken_shim(tmp_path / "bin" / other)
    in_pyenv = link(sys.executable, tmp_path / "pyenv" / "versions" / "x" / "bin" / "python3")
    environ = {"PATH": str(tmp_path / "bin"), "PYENV_ROOT": str(tmp_path / "pyenv")}
    assert wheels.candidates(environ) == [on_path, shim, in_pyenv]
    assert [i.version for i in wheels.find_interpreters(environ)] == [CURRENT]


def test_no_interpreter_is_a_clear_failure(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONS", str(tmp_path / "missing"))
    assert wheels.main(["--out", str(tmp_path / "dist")]) == 1
    assert capsys.readouterr().err.startswith("wheels: no CPython 3.11-3.13 found (set PYTHONS")
    assert not (tmp_path / "dist").exists()
