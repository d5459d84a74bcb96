from __future__ import annotations

from tests.fakes.fixtures import fake_server, http_client  # noqa: F401  (fixtures)
