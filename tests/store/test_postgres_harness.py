"""The throwaway PostgreSQL cluster the team server's tests run on: it starts, and each test's
database is its own."""
from __future__ import annotations

import psycopg

from tests.harness.postgres import PostgresCluster


def test_each_database_is_its_own(postgres_cluster: PostgresCluster, postgres_url: str) -> None:
    other = postgres_cluster.create_database()
    assert other != postgres_url
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE only_here (x int)")
        conn.execute("INSERT INTO only_here VALUES (1)")
    with psycopg.connect(other, autocommit=True) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'").fetchone()
    assert tables == (0,)
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT x FROM only_here").fetchall() == [(1,)]
