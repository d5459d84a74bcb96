"""Locate the shared wire reference (schema.json, fixtures) for the protocol tests.

The shared folder sits beside the repository (`<repo>/../shared`, also in CI, where a fresh
clone gets a copy of shared/ next to it); CURSOR_BYOK_SHARED overrides that.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    override = os.environ.get("CURSOR_BYOK_SHARED")
    path = Path(override) if override else REPO / ".." / "shared"
    wire = path / "cursor-wire"
    if not (wire / "schema.json").is_file():
        # A missing reference is a broken checkout, not a reason to skip: fail loudly.
        raise FileNotFoundError(
            f"shared wire reference not found at {wire} (set CURSOR_BYOK_SHARED to the shared/ folder)"
        )
    return path.resolve()


@pytest.fixture(scope="session")
def wire_dir() -> Path:
    return shared_dir() / "cursor-wire"


@pytest.fixture(scope="session")
def schema(wire_dir: Path) -> dict[str, Any]:
    with open(wire_dir / "schema.json", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture(scope="session")
def fixtures_dir(wire_dir: Path) -> Path:
    return wire_dir / "fixtures"


@pytest.fixture(scope="session")
def anchor_frames(fixtures_dir: Path) -> dict[str, dict[str, str]]:
    with open(fixtures_dir / "anchor_wire_examples.json", encoding="utf-8") as fh:
        frames: dict[str, dict[str, str]] = json.load(fh)["frames"]
    return frames
