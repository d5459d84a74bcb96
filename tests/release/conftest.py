"""Release fixtures: the sdist and this interpreter's wheel, built once per test session the way
`make wheels` builds them (from the sdist, repaired to a manylinux tag on Linux)."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts import wheels


@dataclass(frozen=True)
class Release:
    sdist: Path
    wheel: Path


@pytest.fixture(scope="session")
def dist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dist")


@pytest.fixture(scope="session")
def sdist(dist_dir: Path) -> Path:
    """The one sdist of the session: every test that installs from source uses it."""
    return wheels.build_sdist(dist_dir)


@pytest.fixture(scope="session")
def release(sdist: Path, dist_dir: Path) -> Release:
    current = wheels.probe(sys.executable)
    assert current is not None, f"{sys.executable} is not a supported CPython"
    return Release(sdist, wheels.build_wheel(current, sdist, dist_dir))
