"""The trust store's pure parts: aiohttp's import loads no CA bundle (its two default contexts are
never used by the server, whose clients are all given the trust store), what it makes instead
verifies no less, and only the importing thread is affected. The server's verification end to end:
`tests/e2e/test_outbound_tls.py`."""
from __future__ import annotations

import json
import ssl
import subprocess
import sys
import threading

import certifi
import pytest

from cursor_byok.trust_store import TrustStoreError, default_cas_skipped, verified

COUNT_CA_LOADS = """
import json, ssl
loads = []
for name in ("set_default_verify_paths", "load_verify_locations"):
    original = getattr(ssl.SSLContext, name)
    def counted(self, *args, _original=original, _name=name, **kwargs):
        loads.append(_name)
        return _original(self, *args, **kwargs)
    setattr(ssl.SSLContext, name, counted)
import cursor_byok.http_client
import aiohttp.connector as connector
default = connector._SSL_CONTEXT_VERIFIED
print(json.dumps({"loads": loads, "default": [len(default.get_ca_certs()), default.verify_mode == ssl.CERT_REQUIRED, default.check_hostname]}))
"""


def test_importing_the_http_clients_loads_no_ca_bundle_and_aiohttps_default_trusts_no_one() -> None:
    out = subprocess.run([sys.executable, "-c", COUNT_CA_LOADS], capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen == {"loads": [], "default": [0, True, True]}


def test_only_the_importing_thread_skips_the_default_cas(monkeypatch) -> None:
    made: list[ssl.SSLContext] = []
    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())  # some default CAs, whatever the machine has
    with default_cas_skipped():
        here = ssl.create_default_context()
        other = threading.Thread(target=lambda: made.append(ssl.create_default_context()))
        other.start()
        other.join()
    after = ssl.create_default_context()
    assert len(here.get_ca_certs()) == 0 and here.verify_mode == ssl.CERT_REQUIRED and here.check_hostname
    assert len(made[0].get_ca_certs()) > 0 and len(after.get_ca_certs()) > 0


def test_the_trust_store_follows_ssl_cert_file(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    default = verified()
    assert default.verify_mode == ssl.CERT_REQUIRED and default.check_hostname and len(default.get_ca_certs()) > 100  # certifi's
    one = ssl.create_default_context(cafile=certifi.where()).get_ca_certs(binary_form=True)[0]
    bundle = tmp_path / "one.pem"
    bundle.write_text(ssl.DER_cert_to_PEM_cert(one))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    assert verified().get_ca_certs(binary_form=True) == [one]


def test_a_bundle_that_is_not_pem_is_one_line_naming_it(monkeypatch, tmp_path) -> None:
    bundle = tmp_path / "garbage.pem"
    bundle.write_text("not a certificate\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    with pytest.raises(TrustStoreError) as caught:
        verified()
    message = str(caught.value)
    assert message.startswith(f"the CA certificates in SSL_CERT_FILE={bundle}: ") and "\n" not in message, message


def test_the_ca_load_imports_nothing_once_its_modules_are_imported() -> None:
    """The server loads the CAs in a thread while another imports the rest of the server: two threads
    importing modules that import each other (importlib.resources: certifi's in one, the dashboard's
    in the other) can deadlock, which Python raises as _DeadlockError and the start fails. So the
    load's modules are imported first (`import_modules`), and the load itself imports nothing."""
    script = (
        "import sys\n"
        "from cursor_byok import trust_store\n"
        "trust_store.import_modules()\n"
        "before = set(sys.modules)\n"
        "trust_store.verified()\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout
