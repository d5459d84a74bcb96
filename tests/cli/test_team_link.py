"""The developer's link to a team server: which URLs are taken, and how the token is kept."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest

from cursor_byok.cli.team_link import LINK_FILE, TeamLink, TeamProblem, normalized_url, read_link, save_link


@pytest.mark.parametrize(("given", "url"), [
    ("https://team.example", "https://team.example"),
    ("https://team.example:8443/", "https://team.example:8443"),
    (" https://team.example ", "https://team.example"),
    ("http://127.0.0.1:8787", "http://127.0.0.1:8787"),
])
def test_team_urls(given: str, url: str) -> None:
    assert normalized_url(given) == url


@pytest.mark.parametrize("given", ["team.example", "ftp://team.example", "https://team.example/v1", "https://team.example/?x=1", "http://team.example"])
def test_urls_refused(given: str) -> None:
    with pytest.raises(TeamProblem):
        normalized_url(given)


def test_the_link_is_private_and_read_back(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    (data_dir).mkdir()
    (data_dir / LINK_FILE).write_text("{}")
    (data_dir / LINK_FILE).chmod(0o644)  # an older file left open: replaced by a private one
    path = save_link(data_dir, TeamLink("https://team.example", "token-0123456789abcdef"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_link(data_dir) == TeamLink("https://team.example", "token-0123456789abcdef")
    assert "token-0123456789abcdef" not in repr(read_link(data_dir))


def test_a_damaged_link_is_no_link(tmp_path: Path) -> None:
    (tmp_path / LINK_FILE).write_text("{not json")
    assert read_link(tmp_path) is None
    assert read_link(tmp_path / "absent") is None
