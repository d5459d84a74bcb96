"""A corporate HTTP proxy on loopback: records what goes through it, tunnels CONNECTs, answers
absolute-form requests itself. Runs in its own threads, so sync tests, async tests and
subprocesses can all use it."""
from __future__ import annotations

import select
import socket
import socketserver
import threading
from collections.abc import Callable

Route = Callable[[str, int], tuple[str, int]]


class FakeCorporateProxy:
    """`connects` lists the CONNECT authorities it saw, `requests` the heads of absolute-form requests
    (answered with `answer`), `auth` each request's Proxy-Authorization. A CONNECT is tunnelled to
    `route(host, port)`: the test's stand-in for the host the corporate network would reach."""

    def __init__(self, route: Route | None = None, answer: bytes = b"via corporate proxy") -> None:
        self.connects: list[str] = []
        self.requests: list[bytes] = []
        self.auth: list[str | None] = []
        self.route: Route = route or (lambda host, port: (host, port))
        self.answer = answer
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                owner._handle(self.request)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeCorporateProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            data = client.recv(65536)
            if not data:
                return
            head += data
        head, _, rest = head.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        self.auth.append(headers.get("proxy-authorization"))
        if method != "CONNECT":
            self.requests.append(head + b"\r\n\r\n")
            length = int(headers.get("content-length", "0"))
            while len(rest) < length:
                rest += client.recv(65536)
            client.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                           % (len(self.answer), self.answer))
            return
        self.connects.append(target)
        host, _, port = target.rpartition(":")
        try:
            upstream = socket.create_connection(self.route(host.strip("[]"), int(port)), timeout=5)
        except OSError:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        with upstream:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if rest:
                upstream.sendall(rest)
            _pipe(client, upstream)


def _pipe(a: socket.socket, b: socket.socket) -> None:
    peers = {a: b, b: a}
    while True:
        ready, _, _ = select.select(list(peers), [], [], 10)
        if not ready:
            return
        for sock in ready:
            data = sock.recv(65536)
            if not data:
                return
            peers[sock].sendall(data)


__all__ = ["FakeCorporateProxy"]
