"""Resident memory of a real server under two of issue 33's attacks, before, during and after:

- bodies: 25 connections each send 29 MiB of a declared 30 MiB BidiAppend and stall;
- certificates: 2,000 CONNECTs to random names under cursor.sh, each with a TLS handshake.

    .venv/bin/python -m benchmarks.support.attack_memory [--exe PATH] [--rounds N]

`--exe`: the cursor-byok to measure (default: this checkout's), e.g. a script running an older
checkout's sources. Prints one Markdown table row per attack (MiB, server process), then the RSS
after each of N rounds of 2,000 names (a cache that keeps every name grows by each round).
"""
from __future__ import annotations

import argparse
import contextlib
import socket
import ssl
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tests.e2e.edge_support import EdgeServerConfig, free_port, server_rss
from tests.harness.ide import BIDI_APPEND
from tests.harness.server import ServerProcess

MIB = 1024 * 1024
SETTLE_SECONDS = 12.0  # after the attack: two of the gateway's sweeps (it trims the heap after one)


def body_flood(server: ServerProcess, connections: int = 25, declared: int = 30 * MIB, sent: int = 29 * MIB) -> list[socket.socket]:
    socks = []
    payload = b"\x00" * MIB
    for _ in range(connections):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30.0)
        head = (
            f"POST {BIDI_APPEND} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            f"content-type: application/proto\r\ncontent-length: {declared}\r\n\r\n"
        )
        with contextlib.suppress(OSError):  # a body the server dropped: its connection is closed
            sock.sendall(head.encode())
            for _ in range(sent // MIB):
                sock.sendall(payload)
        socks.append(sock)
    return socks


def certificate_flood(proxy_port: int, ca: Path, names: int = 2000) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    for _ in range(names):
        name = f"{uuid.uuid4().hex}.cursor.sh"
        with socket.create_connection(("127.0.0.1", proxy_port), timeout=30.0) as sock:
            sock.sendall(f"CONNECT {name}:443 HTTP/1.1\r\nHost: {name}:443\r\n\r\n".encode())
            sock.recv(4096)
            with context.wrap_socket(sock, server_hostname=name):
                pass


def measure(exe: Path | None, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="attack-memory-") as tmp:
        cfg = EdgeServerConfig(data_dir=Path(tmp) / "data", proxy_port=free_port())
        with ServerProcess(cfg, cursor_byok=exe) as server:
            before = server_rss(server)
            socks = body_flood(server)
            during = server_rss(server)
            for sock in socks:
                sock.close()
            time.sleep(SETTLE_SECONDS)
            after = server_rss(server)
            print(f"| 25 × 29 MiB stalled BidiAppend bodies | {before / MIB:.0f} | {during / MIB:.0f} | {after / MIB:.0f} |")

            before = server_rss(server)
            assert cfg.proxy_port is not None
            certificate_flood(cfg.proxy_port, cfg.data_dir / "ca" / "ca.crt")
            during = server_rss(server)
            time.sleep(SETTLE_SECONDS)
            after = server_rss(server)
            print(f"| 2,000 CONNECT + TLS, random names | {before / MIB:.0f} | {during / MIB:.0f} | {after / MIB:.0f} |")
            seen = [after]
            for _ in range(rounds):
                certificate_flood(cfg.proxy_port, cfg.data_dir / "ca" / "ca.crt")
                seen.append(server_rss(server))
            print("RSS after each 2,000 more names:", " → ".join(f"{rss / MIB:.0f}" for rss in seen))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exe", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=0)
    args = parser.parse_args(argv)
    measure(args.exe, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
