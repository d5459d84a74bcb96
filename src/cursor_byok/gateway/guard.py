"""One gate in front of every route: who may talk to the server at all.

The server spends the user's API keys for whoever reaches 127.0.0.1, and a web page in the user's
browser can: a cross-origin "simple" POST (text/plain, form types or no type at all) needs no CORS
preflight, and a DNS-rebinding page sends its own name as Host. `RequestGuard.check` runs on every
request before any routing, decoding or forwarding (the dashboard under /ui/ sits behind it too):

- Host (HTTP/2 `:authority` arrives as Host): a loopback name or address with our port, the
  configured `server.host` or one of `server.public_names` (any name when listening on all
  interfaces with a token required and no public names named); a
  Cursor host only on requests our own proxy forwards, which carry its per-process secret
  (`local_trust`). Else 421.
- Origin, when sent, must be the IDE's own (its windows and webviews) or ours (the dashboard).
  Else 403.
- OPTIONS (a CORS preflight) is refused here and never forwarded; no CORS header is ever sent.
- The optional auth token (the health probe excepted); on a team server (`[team] enabled`), a
  developer's token in its header or path prefix (never `authorization`, which carries the IDE's
  Cursor credential): the request then carries the developer's name (`developer_of`). Else 401.
  Listening beyond loopback, a token is required: without one configured (or a team server's
  developers), nothing but the health probe answers (403).
- `x-server-upstream-url` only with the proxy's mark. Else 403.
- A request with a body must declare a content type its route speaks. Else 415. Requests the
  proxy forwards upstream keep whatever type the IDE used (a page cannot send them).

Every check is a set lookup or a compare on header bytes as they come off the wire.
"""
from __future__ import annotations

import hmac
import ipaddress
import logging
import os
from typing import TYPE_CHECKING

import msgspec

from .. import local_trust
from ..apis import is_cursor_host
from ..config import Config
from ..protocol import ConnectError
from .asgi import Scope

if TYPE_CHECKING:
    from ..team import TeamAccess

log = logging.getLogger("cursor_byok.gateway.guard")

CONNECT_UNARY_TYPES = frozenset({b"application/proto", b"application/json"})
CONNECT_STREAM_TYPES = frozenset({b"application/connect+proto", b"application/connect+json"})
GRPC_TYPES = frozenset({b"application/grpc", b"application/grpc+proto", b"application/grpc-web+proto"})
# What a route decodes itself: protobuf, raw or in one Connect envelope.
PROTO_TYPES = frozenset({b"application/proto", b"application/connect+proto"})
# gRPC-Web asks as these (gateway/grpc_web.py). Like the Connect types, no web page can send them
# across origins without a CORS preflight, which is refused.
GRPC_WEB_TYPES = frozenset({b"application/grpc-web", b"application/grpc-web+proto"})
# The agent routes (RunSSE, BidiAppend, Run): Connect and gRPC-Web.
AGENT_TYPES = PROTO_TYPES | GRPC_WEB_TYPES
# The passthrough: whatever Cursor's backend speaks.
UPSTREAM_TYPES = CONNECT_UNARY_TYPES | CONNECT_STREAM_TYPES | GRPC_TYPES
JSON_TYPES = frozenset({b"application/json"})
LOCAL_RPC_TYPES = CONNECT_UNARY_TYPES | CONNECT_STREAM_TYPES | GRPC_WEB_TYPES

# Electron serves the IDE's own windows from this origin and its webviews from vscode-webview://
# origins (schemes no web page can have); its agent traffic (extension host, CLI) sends no Origin.
IDE_ORIGINS = frozenset({b"vscode-file://vscode-app"})
IDE_ORIGIN_SCHEMES = (b"vscode-file://", b"vscode-webview://")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_BODYLESS_METHODS = frozenset({"GET", "HEAD"})
_MAX_LOGGED_ORIGINS = 32

_UPSTREAM_URL = b"x-server-upstream-url"
_PROXY_MARK = local_trust.PROXY_MARK_HEADER.encode()
_TOKEN = local_trust.AUTH_TOKEN_HEADER.encode()
_TOKEN_IN_PATH = "cursor_byok.token_in_path"  # scope key set by route_path
_PATH_TOKEN = "cursor_byok.path_token"  # a team server: the token route_path cut from the path
_DEVELOPER = "cursor_byok.developer"  # a team server: whose token the request carried
# The headers the guard reads; every other header costs one failed set lookup.
_WATCHED = frozenset({b"host", b"origin", b"content-type", b"authorization", _UPSTREAM_URL, _PROXY_MARK, _TOKEN})


class Refusal(msgspec.Struct, frozen=True):
    status: int
    error: ConnectError


def _refuse(status: int, code: str, message: str) -> Refusal:
    return Refusal(status, ConnectError(code, message))


# A team server's answer to a token it does not know: the gateway rereads the developers once
# (one just added) before it is final.
UNKNOWN_DEVELOPER = _refuse(401, "unauthenticated", "missing, unknown or revoked developer token (see cursor-byok users)")


def developer_of(scope: Scope) -> str | None:
    """The developer a team server's request came from (None: not a team server, or no developer)."""
    return scope.get(_DEVELOPER)


def _authorities(host: str, port: int) -> set[bytes]:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    names = {f"{host}:{port}".lower().encode()}
    if port == 80:
        names.add(host.lower().encode())  # browsers leave out the default port
    return names


class RequestGuard:
    """See the module docstring. `check(scope, content_types)` → None (go on) or the Refusal."""

    @classmethod
    def of_server(cls, config: Config) -> RequestGuard:
        """The guard of the server `config` runs: our own proxy's secret from the environment, the
        configured auth token."""
        return cls(config, proxy_secret=os.environ.get(local_trust.PROXY_SECRET_ENV, ""), auth_token=local_trust.auth_token(config))

    def __init__(self, config: Config, *, proxy_secret: str, auth_token: str) -> None:
        server = config.server
        port = server.port
        hosts: set[bytes] = set()
        for name in LOOPBACK_NAMES:
            hosts |= _authorities(name, port)
        wildcard = server.host in ("", "0.0.0.0", "::")
        if not wildcard:
            hosts |= _authorities(server.host, port)
        for name in server.public_names:
            hosts |= _public_authorities(name, port)
        self.hosts = frozenset(hosts)
        self.team: TeamAccess | None = None  # a team server's developers: set by the composition root
        self._team_mode = config.team.enabled
        self.requires_token = bool(auth_token) or self._team_mode
        # Listening on every interface, other machines reach us under names we cannot know; with
        # a token required a rebinding page cannot use any of them, so any Host will do (unless the
        # operator named the public ones).
        self._any_host = wildcard and self.requires_token and not server.public_names
        scheme = b"https://" if server.tls_cert else b"http://"
        self.origins = IDE_ORIGINS | frozenset(scheme + h for h in hosts)
        self._secret = proxy_secret.encode()
        self._token = auth_token.encode()
        self._bearer = b"Bearer " + self._token
        self._path_prefix = f"{local_trust.TOKEN_PATH_PREFIX}{auth_token}/" if auth_token else ""
        self._seen_origins: set[bytes] = set()
        # A team server with its own auth token: the dashboard and /metrics (every developer's
        # conversations and usage) are the operator's, not any developer's.
        self._operator_only = _refuse(
            403, "permission_denied", "the dashboard and /metrics need the server's auth token (server.auth_token), not a developer's",
        ) if self._team_mode and auth_token else None
        # The server spends the keys for whoever reaches it: beyond loopback, only for a token's bearer.
        self._open_beyond_loopback = None if self.requires_token or _is_loopback(server.host) else _refuse(
            403, "permission_denied",
            "this server listens beyond loopback and answers only requests with an auth token: set server.auth_token_env",
        )

    def check(self, scope: Scope, content_types: frozenset[bytes] | None, *, needs_token: bool = True) -> Refusal | None:
        """`content_types`: what the route accepts in a body; None for the upstream passthrough.
        `needs_token`: False only for the health probe (it says no more than "a server is here")."""
        host = origin = content_type = auth = upstream_url = mark = token = None
        hosts = 0
        for name, value in scope["headers"]:
            if name not in _WATCHED:
                continue
            if name == b"host":
                host = value
                hosts += 1
            elif name == b"origin":
                origin = value
            elif name == b"content-type":
                content_type = value
            elif name == b"authorization":
                auth = value
            elif name == _UPSTREAM_URL:
                upstream_url = value
            elif name == _PROXY_MARK:
                mark = value
            else:
                token = value
        marked = mark is not None and bool(self._secret) and hmac.compare_digest(mark, self._secret)
        if hosts != 1 or not self._host_ok(host, marked):
            return _refuse(421, "permission_denied", "request for another host refused (Host must name this server)")
        if origin is not None and origin not in self.origins and not origin.startswith(IDE_ORIGIN_SCHEMES):
            self._log_origin(origin, allowed=False)
            return _refuse(403, "permission_denied", "cross-origin request refused")
        method = scope["method"]
        if method == "OPTIONS":
            return _refuse(405, "unimplemented", "OPTIONS is not served: cross-origin requests are refused")
        if needs_token and self._open_beyond_loopback is not None:
            return self._open_beyond_loopback
        if self.requires_token and needs_token and not self._authorized(scope, auth, token):
            if self._team_mode:
                return UNKNOWN_DEVELOPER
            return _refuse(401, "unauthenticated", "missing or wrong auth token (see server.auth_token)")
        if scope.get(_TOKEN_IN_PATH) is False:
            return _refuse(401, "unauthenticated", "wrong auth token in the path prefix (see server.auth_token)")
        if upstream_url is not None and not marked:
            return _refuse(403, "permission_denied", "x-server-upstream-url is only accepted from the cursor-byok proxy")
        if method not in _BODYLESS_METHODS and not (content_types is None and marked):
            allowed = UPSTREAM_TYPES if content_types is None else content_types
            if not _type_ok(content_type, allowed):
                return self._unsupported(content_type, allowed)
        if origin is not None:
            self._log_origin(origin, allowed=True)
        return None

    def exposed_check(self, scope: Scope) -> Refusal | None:
        """The dashboard, /metrics and the root page, past `check`: who may see what the server did."""
        return self._operator_only if self._operator_only is not None and developer_of(scope) is not None else None

    def from_proxy(self, scope: Scope) -> bool:
        """Whether the request carries our proxy's mark (it came from Cursor through the proxy)."""
        mark = next((value for name, value in scope["headers"] if name == _PROXY_MARK), None)
        return mark is not None and bool(self._secret) and hmac.compare_digest(mark, self._secret)

    def _host_ok(self, host: bytes | None, marked: bool) -> bool:
        if host is None:
            return False
        if host in self.hosts or host.lower() in self.hosts or self._any_host:
            return True
        if not marked:
            return False
        name = host.decode("latin-1").rpartition(":")[0] or host.decode("latin-1")
        return is_cursor_host(name)

    def _authorized(self, scope: Scope, auth: bytes | None, token: bytes | None) -> bool:
        if self._token:
            if token is not None and hmac.compare_digest(token, self._token):
                return True
            if auth is not None and hmac.compare_digest(auth, self._bearer):
                # Our token, not the user's Cursor credential: it must never travel upstream.
                scope["headers"] = [(k, v) for k, v in scope["headers"] if k != b"authorization"]
                return True
            if scope.get(_TOKEN_IN_PATH, False):
                return True
        return self._team_mode and self._developer(scope, token)

    def _developer(self, scope: Scope, token: bytes | None) -> bool:
        """A team server: whether the request carries a developer's token (then it is noted on it)."""
        presented = token if token is not None else scope.get(_PATH_TOKEN)
        developer = None if presented is None or self.team is None else self.team.identify(presented)
        if developer is None:
            return False
        scope[_DEVELOPER] = developer.name
        return True

    def route_path(self, scope: Scope) -> str:
        """The path to route by. A client that can only be given a base URL (the Cursor CLI)
        presents the token as a path prefix: a matching prefix is cut off here, once per request
        (and counts as the token), from the decoded path and from the raw one (where the token
        may be percent-encoded); a prefix with another token is refused (`check`), never routed
        or forwarded, and never echoed. A team server cuts any token prefix here and `check`
        asks its developers whose it is."""
        path: str = scope["path"]
        prefix = self._path_prefix
        if not path.startswith(local_trust.TOKEN_PATH_PREFIX) or not (prefix or self._team_mode):
            return path
        if _TOKEN_IN_PATH in scope or _PATH_TOKEN in scope:
            return path  # cut already
        matched = bool(prefix) and hmac.compare_digest(path[: len(prefix)].encode("utf-8", "replace"), prefix.encode())
        end = path.find("/", len(local_trust.TOKEN_PATH_PREFIX))
        if self._team_mode and not matched and end > 0:
            # Whose token it is, `check` asks the team's developers.
            scope[_PATH_TOKEN] = path[len(local_trust.TOKEN_PATH_PREFIX) : end].encode("utf-8", "replace")
            matched = True
        else:
            scope[_TOKEN_IN_PATH] = matched
        if matched:
            path = scope["path"] = path[end:]
            raw: bytes | None = scope.get("raw_path")
            if raw:
                # The raw prefix ends at the first "/" after the token (a token has none, encoded or not).
                raw_end = raw.find(b"/", len(local_trust.TOKEN_PATH_PREFIX))
                scope["raw_path"] = raw[raw_end:] if raw_end >= 0 else b"/"
        return path

    def _unsupported(self, content_type: bytes | None, allowed: frozenset[bytes]) -> Refusal:
        given = content_type.decode("latin-1")[:80] if content_type is not None else "none"
        expected = ", ".join(sorted(t.decode() for t in allowed))
        return _refuse(415, "unimplemented", f"content type {given!r} is not served here (expected one of: {expected})")

    def _log_origin(self, origin: bytes, *, allowed: bool) -> None:
        """Which origins clients send, once each: the IDE's own tell us what to allow."""
        if origin in self._seen_origins or len(self._seen_origins) >= _MAX_LOGGED_ORIGINS:
            return
        self._seen_origins.add(origin)
        log.info("request origin seen", extra={"origin": origin.decode("latin-1")[:200], "allowed": allowed})


def _public_authorities(name: str, port: int) -> set[bytes]:
    """A configured public name as Host may carry it: as given, and a bare name also with our
    port or a default one (a load balancer or TLS terminator in front keeps the client's)."""
    if name.rpartition(":")[2].isdigit() and not name.endswith("]"):
        return {name.lower().encode()}
    bare = name.lower()
    return {bare.encode(), *(f"{bare}:{p}".encode() for p in {port, 80, 443})}


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def _type_ok(content_type: bytes | None, allowed: frozenset[bytes]) -> bool:
    if content_type is None:
        return False
    if content_type in allowed:
        return True
    return content_type.split(b";", 1)[0].strip().lower() in allowed
