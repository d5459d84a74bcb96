"""A throwaway PostgreSQL cluster for the tests: Debian's `postgresql` binaries (installed by the
Makefile, as Chromium is), `initdb` + `pg_ctl` in a fresh temp dir, listening on a free loopback port,
removed again afterwards. Each test that asks gets a database of its own (`create_database`).

PostgreSQL refuses to run as root (CI runs `make test` as root): then the cluster runs as Debian's
`postgres` system user, which the package creates. Authentication is `trust` on loopback only: the
cluster lives as long as the test session and no one else can reach the port's socket files.
"""
from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .server import free_port

# The one role and the database every connection that is not a test's own lands in.
SUPERUSER = "byok"


def postgres_bin_dir() -> Path:
    """Where `initdb`/`pg_ctl` are: Debian keeps them off PATH, under /usr/lib/postgresql/N/bin."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    raise RuntimeError(
        "PostgreSQL's server binaries are missing: `make test` installs Debian's `postgresql` "
        "(as root), or run `sudo apt-get install postgresql` once"
    )


def _run_as() -> str | None:
    """The user the cluster runs as: None (this one) unless this is root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:  # the Debian package creates it; a bare root machine without it cannot run initdb
        raise RuntimeError("running as root needs the `postgres` system user (Debian's postgresql package)") from exc
    return "postgres"


@dataclass
class PostgresCluster:
    """One running cluster; `url(database)` connects to it."""

    root: Path
    port: int
    user: str | None
    bin_dir: Path
    _names: itertools.count = field(default_factory=lambda: itertools.count(1))

    @classmethod
    def start(cls, *, fsync: bool = False) -> PostgresCluster:
        """`fsync`: commits reach the disk as on a real server (benchmarks); off for the tests."""
        bin_dir = postgres_bin_dir()
        user = _run_as()
        # Not under pytest's tmp dirs: those are 0700 root's, which the `postgres` user cannot enter.
        root = Path(tempfile.mkdtemp(prefix="byok-pg-"))
        os.chmod(root, 0o700)
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        cluster = cls(root=root, port=free_port(), user=user, bin_dir=bin_dir)
        try:
            cluster._pg(
                "initdb", "-D", str(root / "data"), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8",
                "--locale=C", "--no-sync",
            )
            options = (
                f"-c listen_addresses=127.0.0.1 -c port={cluster.port} -c unix_socket_directories={root} "
                # A throwaway cluster: durability is the store's promise to the server, not the test
                # cluster's to the machine; fsync off keeps a suite of small databases fast.
                + ("" if fsync else "-c fsync=off -c full_page_writes=off ")
                + "-c synchronous_commit=on -c max_connections=200"
            )
            cluster._pg("pg_ctl", "-D", str(root / "data"), "-l", str(root / "log"), "-o", options, "-w", "-t", "60", "start")
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _pg(self, tool: str, *args: str) -> None:
        result = subprocess.run(
            [str(self.bin_dir / tool), *args],
            user=self.user,
            cwd=self.root,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            log = self.root / "log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{tool} failed ({result.returncode}): {result.stderr.strip()}\n{tail}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; its URL."""
        import psycopg  # the dev extras have it; only tests that ask for a cluster import it

        name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            if (self.root / "data" / "postmaster.pid").exists():
                self._pg("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
