"""Fixtures for the hot-path suite: every behaviour runs against the pure twin and the compiled
module. A missing compiled module fails the compiled cases under CURSOR_BYOK_REQUIRE_COMPILED=1
(`make test`) and skips them otherwise."""
from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from cursor_byok import hotpath

IMPLEMENTATIONS = ("python", "compiled")

BOUNDED = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SOAK = settings(
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def module_for(part: str, implementation: str) -> ModuleType:
    if implementation == "python":
        return hotpath.twins[part]
    module = hotpath.compiled[part]
    if module is None:
        message = f"compiled hot path module for {part!r} is not built"
        if os.environ.get("CURSOR_BYOK_REQUIRE_COMPILED") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return module


def twin_and_compiled(part: str) -> tuple[ModuleType, ModuleType]:
    return module_for(part, "python"), module_for(part, "compiled")


@pytest.fixture(params=IMPLEMENTATIONS)
def frames(request: pytest.FixtureRequest) -> ModuleType:
    return module_for("frames", request.param)


@pytest.fixture(params=IMPLEMENTATIONS)
def seqno(request: pytest.FixtureRequest) -> ModuleType:
    return module_for("seqno", request.param)


@pytest.fixture(params=IMPLEMENTATIONS)
def prefix(request: pytest.FixtureRequest) -> ModuleType:
    return module_for("prefix", request.param)


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """A comparable record of a call: its value, or its hot-path error's type, code and message."""
    try:
        return ("ok", call())
    except hotpath.HotPathError as exc:
        return ("error", type(exc), exc.code, str(exc))


def cut(data: st.DataObject, blob: bytes, max_pieces: int = 40) -> list[bytes]:
    """Split `blob` at hypothesis-chosen points (empty chunks included)."""
    if not blob:
        return [b""]
    points = data.draw(st.lists(st.integers(0, len(blob)), max_size=max_pieces))
    bounds = [0, *sorted(points), len(blob)]
    return [blob[a:b] for a, b in zip(bounds, bounds[1:])]


@pytest.fixture(params=IMPLEMENTATIONS)
def wire(request: pytest.FixtureRequest) -> ModuleType:
    return module_for("wire", request.param)
