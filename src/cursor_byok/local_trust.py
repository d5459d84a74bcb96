"""What the intercepting proxy and the gateway share so the gateway can tell them from a web page.

- The proxy marks every request it forwards with a per-process secret (`x-cursor-byok-proxy`).
  Only a marked request may carry `x-server-upstream-url` or name a Cursor host as its Host: a
  page in the user's browser cannot know the secret. The secret lives in the server's environment
  so the proxy (main process) and the gateway (its worker) see the same value.
- The optional auth token (`server.auth_token` / `server.auth_token_env`) travels in its own
  header (`x-cursor-byok-token`), as `authorization: Bearer`, or, for a client that can only be
  given a base URL (the Cursor CLI's CURSOR_API_ENDPOINT), as a path prefix `/_token/<token>`.
  The proxy adds the header itself.
"""
from __future__ import annotations

import os
import re
import secrets
import stat

from .config import Config, ConfigError

PROXY_MARK_HEADER = "x-cursor-byok-proxy"
AUTH_TOKEN_HEADER = "x-cursor-byok-token"
PROXY_SECRET_ENV = "CURSOR_BYOK_PROXY_SECRET"
TOKEN_PATH_PREFIX = "/_token/"
# URL-safe, so the same token works in a header and in a path.
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9._~-]{16,256}")


def proxy_secret() -> str:
    """This server's proxy secret, made on first use and inherited by its worker processes."""
    value = os.environ.get(PROXY_SECRET_ENV)
    if not value:
        value = os.environ[PROXY_SECRET_ENV] = secrets.token_urlsafe(24)
    return value


def auth_token(cfg: Config) -> str:
    """The configured auth token, '' when none is set. ConfigError when its env var is missing."""
    server = cfg.server
    key, token = "server.auth_token", server.auth_token
    if server.auth_token_env:
        key, token = "server.auth_token_env", os.environ.get(server.auth_token_env, "")
        if not token:
            raise ConfigError(f"{cfg.source}: {key}: environment variable {server.auth_token_env} is not set")
    if token and not _TOKEN_SHAPE.fullmatch(token):
        raise ConfigError(f"{cfg.source}: {key}: use 16 to 256 of A-Z a-z 0-9 . _ ~ - (e.g. `openssl rand -hex 24`)")
    if server.auth_token:
        _refuse_readable(cfg.source, key)
    return token


def _refuse_readable(source: str, key: str) -> None:
    """A secret written in the config file is kept as the secrets file is: readable by its owner only."""
    if os.name != "posix" or source.startswith("<"):
        return
    try:
        mode = stat.S_IMODE(os.stat(source).st_mode)
    except OSError:
        return  # read a moment ago; a file gone since has nothing left to expose
    if mode & 0o077:
        raise ConfigError(
            f"{source}: {key}: the file holds a secret, so its permissions must be 0600 (run: chmod 600 {source}), "
            "or move the token to an environment variable (server.auth_token_env)"
        )


def proxy_headers(cfg: Config) -> list[tuple[str, str]]:
    """The headers the proxy adds to every request it forwards to the gateway."""
    headers = [(PROXY_MARK_HEADER, proxy_secret())]
    token = auth_token(cfg)
    if token:
        headers.append((AUTH_TOKEN_HEADER, token))
    return headers
