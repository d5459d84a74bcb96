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
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    current = wheels.probe(sys.executable)
    assert current is not None, f"{sys.executable} is not a supported CPython"
    out = tmp_path_factory.mktemp("dist")
    sdist = wheels.build_sdist(out)
    return Release(sdist, wheels.build_wheel(current, sdist, out))
