"""Debian's nginx in front of `serve` processes, from the deployment's own template
(deploy/nginx/cursor-byok.conf.template): the compose topology without Docker. Installed by the
Makefile (like Chromium and PostgreSQL); run in the foreground with its files in a temp dir."""
from __future__ import annotations

import contextlib
import os
import shutil
import string
import subprocess
import time
from pathlib import Path

import httpx

from tests.harness.server import free_port
from tests.harness.tls import ServerCertificate

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "deploy" / "nginx" / "cursor-byok.conf.template"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def render(values: dict[str, str]) -> str:
    """The template with its ${BYOK_...} filled in, nginx's own $variables left as they are (what
    the nginx image's envsubst does with the variables it is given)."""
    return string.Template(TEMPLATE.read_text()).safe_substitute(values)


def main_config(prefix: Path, site: str) -> str:
    """A whole nginx.conf around `site`, everything it writes under `prefix`."""
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers must reach the test's private temp dir
    return (
        f"{user}worker_processes 1;\npid {prefix}/nginx.pid;\nerror_log stderr warn;\n"
        "events { worker_connections 512; }\n"
        "http {\n"
        # Which instance served each request of each request id: what affinity is judged by.
        "  log_format affinity '$http_x_request_id $upstream_addr';\n"
        f"  access_log {prefix}/affinity.log affinity;\n  client_body_temp_path {prefix}/body;\n  proxy_temp_path {prefix}/proxy;\n"
        f"  fastcgi_temp_path {prefix}/fastcgi;\n  uwsgi_temp_path {prefix}/uwsgi;\n  scgi_temp_path {prefix}/scgi;\n"
        f"{site}\n}}\n"
    )


class NginxProcess:
    def __init__(self, prefix: Path, certificate: ServerCertificate, instances: tuple[str, str]) -> None:
        self.prefix = prefix
        self.port = free_port()
        tls_dir = certificate.cert_file.parent
        site = render({"BYOK_LISTEN": f"127.0.0.1:{self.port}", "BYOK_INSTANCE_A": instances[0], "BYOK_INSTANCE_B": instances[1], "BYOK_TLS_DIR": str(tls_dir)})
        prefix.mkdir(parents=True, exist_ok=True)
        self.config = prefix / "nginx.conf"
        self.config.write_text(main_config(prefix, site))
        self.certificate = certificate
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = prefix / "nginx.log"

    def served(self) -> dict[str, set[str]]:
        """Request id → the instances (host:port) that served its requests, from nginx's log."""
        seen: dict[str, set[str]] = {}
        for line in (self.prefix / "affinity.log").read_text().splitlines():
            request_id, _, instance = line.partition(" ")
            if request_id != "-":
                seen.setdefault(request_id, set()).add(instance)
        return seen

    def test_config(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run([NGINX, "-t", "-p", str(self.prefix), "-c", str(self.config), "-e", "stderr"], capture_output=True, text=True, timeout=30)

    @property
    def base_url(self) -> str:
        return f"https://localhost:{self.port}"

    def start(self, timeout: float = 20.0) -> NginxProcess:
        """Until a health probe through it answers (an instance behind it is up)."""
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        command = [NGINX, "-p", str(self.prefix), "-c", str(self.config), "-e", "stderr", "-g", "daemon off;"]
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        with httpx.Client(verify=self.certificate.client_context(), timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"nginx exited with {self.proc.returncode}: {self.log_path.read_text(errors='replace')}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(self.base_url + "/healthz").status_code == 204:
                        return self
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"nginx did not answer: {self.log_path.read_text(errors='replace')}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> NginxProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
