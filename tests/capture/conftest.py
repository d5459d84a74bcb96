"""Capture tests: the real server with a fake provider, the scripted IDE, the `capture` and
`replay` commands run as a user runs them."""
from __future__ import annotations

from tests.fakes.fixtures import provider, shared_provider  # noqa: F401  (fixtures)
