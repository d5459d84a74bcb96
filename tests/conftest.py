"""Fixtures every folder may ask for."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.postgres import PostgresCluster


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """One throwaway PostgreSQL cluster per test process, started the first time a test asks."""
    cluster = PostgresCluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster: PostgresCluster) -> str:
    """A fresh, empty database of its own for one test."""
    return postgres_cluster.create_database()


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Where a server test's server keeps its state: "" (the embedded SQLite file) or a fresh
    PostgreSQL database. A test that takes it runs once on each backend."""
    return "" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
