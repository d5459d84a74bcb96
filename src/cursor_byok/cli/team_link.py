"""A developer's link to a team server (`cursor-byok connect`): where it is and the developer's
token, kept in the data dir as the other secrets are (0600), and what the team server says when
asked (reachable, its TLS certificate trusted, the token accepted, the models it serves).

HTTP and TLS are imported when a team server is asked, not before: `doctor` loads this module
whether or not the machine is linked to one."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .. import local_trust

if TYPE_CHECKING:
    import httpx

LINK_FILE = "team-link.json"
TOKEN_ENV = "CURSOR_BYOK_TEAM_TOKEN"
REST_MODELS_PATH = "/v1/models"
HEALTH_PATH = "/healthz"
TEAM_TIMEOUT_SECONDS = 10.0


class TeamProblem(Exception):
    """The team server cannot be used (one line: what is wrong, never the token)."""


class TeamUnreachable(TeamProblem):
    """No answer from the team server (down, or no network): it may well answer later."""


@dataclass(frozen=True)
class TeamLink:
    url: str
    token: str = field(repr=False)

    def headers(self) -> dict[str, str]:
        return {local_trust.AUTH_TOKEN_HEADER: self.token}


def read_link(data_dir: Path) -> TeamLink | None:
    """The saved link, None when there is none (or it cannot be read)."""
    try:
        saved = json.loads((data_dir / LINK_FILE).read_text(encoding="utf-8"))
        return TeamLink(str(saved["url"]), str(saved["token"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_link(data_dir: Path, link: TeamLink) -> Path:
    """Write the link readable by its owner alone (written whole, then moved into place)."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = data_dir / LINK_FILE
    partial = path.with_suffix(".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"url": link.url, "token": link.token}, fh)
    os.chmod(partial, 0o600)  # an older partial may have been made with another mode
    os.replace(partial, path)
    return path


def normalized_url(url: str) -> str:
    """The team server's base URL: https (http only on loopback, for a test or a tunnel), no path."""
    from urllib.parse import urlsplit

    parts = urlsplit(url.strip())
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise TeamProblem(f"{url[:200]!r} is not a team server URL (https://team.example or https://team.example:8443)")
    if parts.scheme == "http" and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise TeamProblem(f"{url[:200]!r}: the developer token would travel in the clear: use https://")
    return f"{parts.scheme}://{parts.netloc}"


def team_client(timeout: float = TEAM_TIMEOUT_SECONDS) -> httpx.Client:
    """A client that verifies the team server with the trust store (SSL_CERT_FILE names a team's own CA)."""
    import httpx

    from .. import trust_store

    return httpx.Client(timeout=timeout, verify=trust_store.verified(), follow_redirects=False, trust_env=True)


def team_models(client: httpx.Client, link: TeamLink) -> list[str]:
    """The ids (and variant aliases) of the models the team server serves; TeamProblem saying which
    step failed: reaching it, its certificate, the token, the list."""
    import ssl

    import httpx

    try:
        client.get(link.url + HEALTH_PATH)
    except httpx.ConnectError as exc:
        cause = exc.__context__ or exc.__cause__
        if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(exc):
            reason = getattr(cause, "verify_message", "") or "not trusted"
            raise TeamProblem(
                f"team server {link.url}: its TLS certificate is not valid here ({reason}); "
                "if the team uses its own CA, name it in SSL_CERT_FILE"
            ) from None
        raise TeamUnreachable(f"team server {link.url} unreachable: {exc}") from None
    except httpx.HTTPError as exc:
        raise TeamUnreachable(f"team server {link.url} unreachable: {exc.__class__.__name__}") from None
    try:
        answer = client.get(link.url + REST_MODELS_PATH, headers=link.headers())
    except httpx.HTTPError as exc:
        raise TeamProblem(f"team server {link.url}: its model list failed: {exc.__class__.__name__}") from None
    if answer.status_code == 401:
        raise TeamProblem(f"team server {link.url} refused the developer token: ask its operator for a new one")
    if not answer.is_success:
        raise TeamProblem(f"team server {link.url}: its model list answered HTTP {answer.status_code}")
    try:
        items = answer.json()["items"]
        ids = [str(item["id"]) for item in items] + [str(a) for item in items for a in item.get("aliases", [])]
    except (ValueError, KeyError, TypeError):
        raise TeamProblem(f"team server {link.url}: {REST_MODELS_PATH} is not a model list (is this a cursor-byok server?)") from None
    if not ids:
        raise TeamProblem(f"team server {link.url} serves no models (its operator adds [[models]] to its config)")
    return ids
