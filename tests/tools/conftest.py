from __future__ import annotations

import pytest

from cursor_byok.tools import ToolContext

from .support import FakeClock, make_ctx


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ctx(clock: FakeClock) -> ToolContext:
    return make_ctx(clock)
