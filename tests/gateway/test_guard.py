"""RequestGuard as a pure function of a request's scope (the e2e tests cover it on the wire)."""
from __future__ import annotations

import pytest

from cursor_byok.config import parse
from cursor_byok.gateway.guard import AGENT_TYPES, PROTO_TYPES, RequestGuard

SECRET = "s3cret-mark"
TOKEN = "token-0123456789abcdef"


def guard(token: str = "", host: str = "127.0.0.1") -> RequestGuard:
    return RequestGuard(parse({"server": {"host": host, "port": 8787}}), proxy_secret=SECRET, auth_token=token)


def scope(method: str = "POST", path: str = "/x", **headers: str) -> dict[str, object]:
    pairs = [(b"host", b"127.0.0.1:8787"), (b"content-type", b"application/proto")]
    for name, value in headers.items():
        key = name.replace("_", "-").encode()
        pairs = [(k, v) for k, v in pairs if k != key]
        if value is not None:
            pairs.append((key, value.encode()))
    return {"method": method, "path": path, "raw_path": path.encode(), "headers": pairs}


def refused(result: object) -> tuple[int, str] | None:
    return None if result is None else (result.status, result.error.code)  # type: ignore[attr-defined]


@pytest.mark.parametrize("host", ["127.0.0.1:8787", "localhost:8787", "LOCALHOST:8787", "[::1]:8787"])
def test_loopback_hosts_with_our_port_pass(host: str) -> None:
    assert guard().check(scope(host=host), PROTO_TYPES) is None


@pytest.mark.parametrize("host", ["evil.example", "127.0.0.1:80", "127.0.0.1", "", "api2.cursor.sh", "127.0.0.1:8787.evil"])
def test_other_hosts_are_421(host: str) -> None:
    assert refused(guard().check(scope(host=host), PROTO_TYPES)) == (421, "permission_denied")


def test_two_host_headers_are_421() -> None:
    s = scope()
    s["headers"].append((b"host", b"evil.example"))  # type: ignore[attr-defined]
    assert refused(guard().check(s, PROTO_TYPES)) == (421, "permission_denied")


def test_a_configured_host_passes() -> None:
    configured = guard(token=TOKEN, host="myhost.lan")
    assert configured.check(scope(host="myhost.lan:8787", x_cursor_byok_token=TOKEN), PROTO_TYPES) is None


def test_marked_requests_may_name_a_cursor_host_and_carry_the_upstream_url() -> None:
    marked = scope(host="api2.cursor.sh", x_cursor_byok_proxy=SECRET, x_server_upstream_url="https://api2.cursor.sh/x")
    assert guard().check(marked, None) is None
    forged = scope(x_cursor_byok_proxy="nope", x_server_upstream_url="https://api2.cursor.sh/x")
    assert refused(guard().check(forged, None)) == (403, "permission_denied")
    assert refused(guard().check(scope(host="api2.cursor.sh:443", x_cursor_byok_proxy="nope"), None)) == (421, "permission_denied")


def test_origins() -> None:
    g = guard()
    for allowed in ("vscode-file://vscode-app", "vscode-webview://1a2b3c", "http://127.0.0.1:8787", "http://localhost:8787"):
        assert g.check(scope(origin=allowed), PROTO_TYPES) is None, allowed
    for foreign in ("http://evil.example", "null", "http://127.0.0.1:8788", "https://localhost:8787"):
        assert refused(g.check(scope(origin=foreign), PROTO_TYPES)) == (403, "permission_denied"), foreign


def test_options_is_refused() -> None:
    assert refused(guard().check(scope(method="OPTIONS"), None)) == (405, "unimplemented")


@pytest.mark.parametrize(
    ("content_type", "ok"),
    [("application/proto", True), ("application/connect+proto", True), ("Application/Proto; charset=x", True),
     ("application/json", False), ("text/plain", False), (None, False), ("application/x-www-form-urlencoded", False)],
)
def test_local_routes_take_only_their_content_types(content_type: str | None, ok: bool) -> None:
    result = guard().check(scope(content_type=content_type), PROTO_TYPES)
    assert (result is None) is ok
    if not ok:
        assert refused(result) == (415, "unimplemented")


@pytest.mark.parametrize(
    ("content_type", "ok"),
    [("application/grpc-web+proto", True), ("application/grpc-web", True), ("application/proto", True),
     ("application/grpc-web+json", False), ("application/grpc-web-text", False), ("text/plain", False), ("multipart/form-data", False)],
)
def test_agent_routes_take_grpc_web_beside_connect_and_no_type_a_page_may_send(content_type: str, ok: bool) -> None:
    """gRPC-Web's types, like Connect's, are not ones a page may send across origins without a
    preflight (refused): they add no way in for a web page."""
    result = guard().check(scope(content_type=content_type), AGENT_TYPES)
    assert (result is None) is ok
    if not ok:
        assert refused(result) == (415, "unimplemented")


def test_the_passthrough_takes_connect_and_grpc_types_and_bodiless_gets() -> None:
    g = guard()
    for content_type in ("application/json", "application/connect+json", "application/grpc-web+proto"):
        assert g.check(scope(content_type=content_type), None) is None
    assert refused(g.check(scope(content_type="text/plain"), None)) == (415, "unimplemented")
    assert g.check(scope(method="GET", content_type=None), None) is None
    # the IDE's own requests through our proxy keep whatever type they use
    assert g.check(scope(content_type="text/plain", x_cursor_byok_proxy=SECRET), None) is None


def test_the_auth_token() -> None:
    g = guard(token=TOKEN)
    assert refused(g.check(scope(), PROTO_TYPES)) == (401, "unauthenticated")
    assert refused(g.check(scope(x_cursor_byok_token=TOKEN + "x"), PROTO_TYPES)) == (401, "unauthenticated")
    assert g.check(scope(x_cursor_byok_token=TOKEN), PROTO_TYPES) is None
    assert g.check(scope(), PROTO_TYPES, needs_token=False) is None  # the health probe
    bearer = scope(authorization=f"Bearer {TOKEN}")
    assert g.check(bearer, PROTO_TYPES) is None
    assert all(k != b"authorization" for k, _ in bearer["headers"])  # type: ignore[attr-defined]
    cursor_auth = scope(authorization="Bearer cursor-session", x_cursor_byok_token=TOKEN)
    assert g.check(cursor_auth, None) is None
    assert (b"authorization", b"Bearer cursor-session") in cursor_auth["headers"]  # type: ignore[operator]


def test_the_token_as_a_path_prefix() -> None:
    g = guard(token=TOKEN)
    s = scope(path=f"/_token/{TOKEN}/agent.v1.AgentService/RunSSE")
    assert g.route_path(s) == "/agent.v1.AgentService/RunSSE"
    assert s["raw_path"] == b"/agent.v1.AgentService/RunSSE"
    assert g.check(s, PROTO_TYPES) is None
    wrong = scope(path=f"/_token/{TOKEN}x/agent.v1.AgentService/RunSSE")
    assert g.route_path(wrong) == wrong["path"]
    assert refused(g.check(wrong, PROTO_TYPES)) == (401, "unauthenticated")
    assert guard().route_path(scope(path="/_token/abc/x")) == "/_token/abc/x"  # no token configured


def test_on_every_interface_other_names_need_the_token() -> None:
    lan = scope(host="192.0.2.7:8787")
    assert refused(guard(host="0.0.0.0").check(lan, PROTO_TYPES)) == (421, "permission_denied")
    with_token = guard(token=TOKEN, host="0.0.0.0")
    assert with_token.check(scope(host="192.0.2.7:8787", x_cursor_byok_token=TOKEN), PROTO_TYPES) is None
    assert refused(with_token.check(scope(host="192.0.2.7:8787"), PROTO_TYPES)) == (401, "unauthenticated")


def public_guard(token: str = TOKEN, **server: object) -> RequestGuard:
    settings = {"host": "0.0.0.0", "port": 8787, "public_names": ["team.example", "byok.example:8443"], **server}
    return RequestGuard(parse({"server": settings}), proxy_secret=SECRET, auth_token=token)


@pytest.mark.parametrize("host", ["team.example", "TEAM.example:8787", "team.example:443", "byok.example:8443", "127.0.0.1:8787"])
def test_configured_public_names_pass_as_host(host: str) -> None:
    assert public_guard().check(scope(host=host, x_cursor_byok_token=TOKEN), PROTO_TYPES) is None


@pytest.mark.parametrize("host", ["evil.example", "team.example.evil", "byok.example", "byok.example:8787", "192.0.2.7:8787"])
def test_with_public_names_other_hosts_are_421_even_with_the_token(host: str) -> None:
    """Named public names are the whole list: a rebinding name is refused before the token is looked at."""
    assert refused(public_guard().check(scope(host=host, x_cursor_byok_token=TOKEN), PROTO_TYPES)) == (421, "permission_denied")


def test_public_names_are_allowed_origins_over_tls_only_as_https() -> None:
    tls = public_guard(tls_cert="/c.pem", tls_key="/k.pem")
    for allowed in ("https://team.example", "https://byok.example:8443", "https://127.0.0.1:8787"):
        assert tls.check(scope(host="team.example", origin=allowed, x_cursor_byok_token=TOKEN), PROTO_TYPES) is None, allowed
    for foreign in ("http://team.example", "https://evil.example", "http://127.0.0.1:8787"):
        assert refused(tls.check(scope(host="team.example", origin=foreign, x_cursor_byok_token=TOKEN), PROTO_TYPES)) == (403, "permission_denied"), foreign


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "myhost.lan"])
def test_beyond_loopback_without_a_token_only_health_answers(host: str) -> None:
    g = guard(host=host)
    own = f"{host}:8787" if host != "0.0.0.0" else "127.0.0.1:8787"
    refusal = g.check(scope(host=own), PROTO_TYPES)
    assert refused(refusal) == (403, "permission_denied")
    assert "auth token" in refusal.error.message  # type: ignore[union-attr]
    assert g.check(scope(method="GET", host=own), frozenset(), needs_token=False) is None  # the health probe


def test_beyond_loopback_every_route_needs_the_token() -> None:
    g = guard(token=TOKEN, host="192.0.2.7")
    assert refused(g.check(scope(host="192.0.2.7:8787"), PROTO_TYPES)) == (401, "unauthenticated")
    assert refused(g.check(scope(host="192.0.2.7:8787"), None)) == (401, "unauthenticated")
    assert g.check(scope(host="192.0.2.7:8787", x_cursor_byok_token=TOKEN), PROTO_TYPES) is None


async def test_a_team_server_takes_developer_tokens_in_the_header_or_the_path_never_the_bearer(tmp_path) -> None:
    from cursor_byok.gateway.guard import developer_of
    from cursor_byok.store import DeveloperRecord, Store
    from cursor_byok.team import TeamAccess, new_token, token_digest

    config = parse({"server": {"host": "127.0.0.1", "port": 8787}, "team": {"enabled": True}})
    store = await Store.open(tmp_path / "state.db")
    try:
        token = new_token()
        await store.add_developer(DeveloperRecord(name="alice", token_sha256=token_digest(token.encode()), created_at_ms=1))
        team = TeamAccess(config, store)
        await team.refresh()
    finally:
        await store.close()
    g = RequestGuard(config, proxy_secret=SECRET, auth_token="")
    g.team = team
    assert g.requires_token

    by_header = scope(x_cursor_byok_token=token)
    assert g.check(by_header, PROTO_TYPES) is None and developer_of(by_header) == "alice"

    by_path = scope(path=f"/_token/{token}/agent.v1.AgentService/RunSSE")
    assert g.route_path(by_path) == "/agent.v1.AgentService/RunSSE"
    assert g.route_path(by_path) == "/agent.v1.AgentService/RunSSE"  # cut once
    assert by_path["raw_path"] == b"/agent.v1.AgentService/RunSSE"
    assert g.check(by_path, PROTO_TYPES) is None and developer_of(by_path) == "alice"

    for refused_scope in (
        scope(), scope(authorization=f"Bearer {token}"), scope(x_cursor_byok_token="y" * 43),
        scope(path=f"/_token/{'y' * 43}/x"),
    ):
        g.route_path(refused_scope)
        assert refused(g.check(refused_scope, PROTO_TYPES)) == (401, "unauthenticated")
        assert developer_of(refused_scope) is None
    assert g.check(scope(method="GET"), frozenset(), needs_token=False) is None  # the health probe
    assert developer_of(scope()) is None
