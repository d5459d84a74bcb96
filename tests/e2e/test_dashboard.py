"""The dashboard in a real browser (Debian's headless Chromium, driven by Playwright): after a turn
with a tool call, every page renders from the server's API, shows that conversation and its calls,
draws its charts, and logs no console error. A screenshot of each page is saved (set
DASHBOARD_SCREENSHOTS=docs to refresh the README's).

And the guard around it: beyond loopback the dashboard and /metrics need the auth token."""
from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, async_playwright

from tests.fakes import OPENAI_CHAT, CallSpec, FakeProviderServer, UsageSpec
from tests.harness.ide import ScriptedIDE, run_request
from tests.harness.server import ModelSpec, ServerConfig, ServerProcess

from .test_browser import CHROMIUM

MODEL = "byok-dash"
PAGES = ("overview", "conversations", "conversation", "live", "developers", "models")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, shared_provider: FakeProviderServer) -> Iterator[ServerProcess]:
    config = ServerConfig(
        data_dir=tmp_path_factory.mktemp("dashboard") / "data",
        models=[ModelSpec(id=MODEL, provider="openai-chat", base_url=shared_provider.url + "/v1",
                          extra="price = { input = 3.0, output = 15.0, cache_read = 0.3 }")],
    )
    with ServerProcess(config) as proc:
        yield proc


@pytest_asyncio.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        # Debian's Chromium, never a browser downloaded by Playwright.
        chromium = await pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        try:
            yield chromium
        finally:
            await chromium.close()


def screenshots_dir(tmp_path: Path) -> Path:
    target = os.environ.get("DASHBOARD_SCREENSHOTS")
    return Path(__file__).resolve().parents[2] / target if target else tmp_path


async def open_page(page: Page, url: str, name: str) -> None:
    await page.goto(url)
    await page.wait_for_selector(f"body[data-ready='{name}']", timeout=15_000)


async def test_every_page_shows_the_turn_and_logs_no_error(
    server: ServerProcess, provider: FakeProviderServer, browser: Browser, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "notes.txt").write_text("remember the milk\n")
    provider.enqueue(
        OPENAI_CHAT.tool_calls([CallSpec("c1", "Read", [json.dumps({"path": str(workspace / "notes.txt")})])], usage=UsageSpec(input=900, output=40, cache_read=300)),
        OPENAI_CHAT.text(["You need milk."], usage=UsageSpec(input=300, output=12, cache_read=1000)),
        OPENAI_CHAT.text(["Hello there, friend."], usage=UsageSpec(input=12, output=5)),  # the models page's test
    )
    conversation_id = uuid.uuid4().hex
    ide = ScriptedIDE(server.base_url, workspace)
    try:
        log = await ide.turn(run_request("what is on my shopping list?", model=MODEL, conversation_id=conversation_id))
    finally:
        await ide.close()
    assert log.terminal is None

    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    shots = screenshots_dir(tmp_path)
    base = f"{server.base_url}/ui/"

    # Overview: the turn's two calls, and five charts, each with something drawn.
    await open_page(page, base, "overview")
    for _ in range(50):  # records are written after the turn: reload until they are there
        if "2" == (await page.locator(".card .value").first.text_content()):
            break
        await page.wait_for_timeout(100)
        await open_page(page, base, "overview")
    assert await page.locator(".card .value").first.text_content() == "2"
    charts = page.locator("svg.chart")
    assert await charts.count() == 5
    drawn = await page.evaluate("""() => [...document.querySelectorAll('svg.chart')].map(svg =>
        [...svg.querySelectorAll('rect.bar, circle.dot')].some(mark => mark.getBBox().height > 0))""")
    assert drawn == [True, True, True, True, False], drawn  # the errors chart has nothing to draw: no error
    tokens = await page.evaluate("document.querySelector('svg.chart path.series-input_tokens').getAttribute('d')")
    assert tokens.count("L") >= 1  # a line through the day's buckets, not a lone point
    # Cost per day: today's row for the model, priced (the prices are in the server's config).
    [day] = httpx.get(f"{server.base_url}/ui/api/usage?since=7d&by=day", timeout=5).json()["rows"]
    row = page.locator(f"tr[data-day='{day['group']}']")
    assert MODEL in await row.text_content() and f"${day['cost']:.4f}" in await row.text_content() and day["cost"] > 0
    await page.screenshot(path=str(shots / "dashboard-overview.png"), full_page=True)

    # Conversations: the turn's conversation with its first message; then that conversation.
    await open_page(page, base + "#/conversations", "conversations")
    row = page.locator(f"tr[data-conversation='{conversation_id}']")
    assert "what is on my shopping list?" in await row.text_content()
    await page.screenshot(path=str(shots / "dashboard-conversations.png"), full_page=True)
    await row.locator("a").click()
    await page.wait_for_selector("body[data-ready='conversations'] section.run", timeout=15_000)
    calls = page.locator("section.run tr[data-trace]")
    assert await calls.count() == 2
    assert "Read" in await calls.nth(0).text_content() and "succeeded" in await page.locator("section.run").text_content()
    # The detailed mode is off by default: no bodies kept, no bodies button.
    detail = httpx.get(f"{server.base_url}/ui/api/conversations/{conversation_id}", timeout=5).json()
    assert [c["has_bodies"] for c in detail["runs"][0]["calls"]] == [False, False]
    assert await page.locator("section.run button", has_text="bodies").count() == 0
    await page.screenshot(path=str(shots / "dashboard-conversation.png"), full_page=True)

    await open_page(page, base + "#/live", "live")
    assert "No run in progress" in await page.locator("main").text_content()
    await page.screenshot(path=str(shots / "dashboard-live.png"), full_page=True)

    # Developers (a team server's usage per developer): here, one model's calls made for none.
    await open_page(page, base + "#/developers", "developers")
    row = page.locator("tr[data-user='']")
    assert await row.count() == 1 and MODEL in await row.text_content()

    # Models: the test button measures the model through the server.
    await open_page(page, base + "#/models", "models")
    # its price as configured: cache_write is not set, and is shown as unset, not as a price of 0
    assert "3 / 15 / 0.3 / -" in await page.locator(f"tr:has(button[data-model='{MODEL}'])").text_content()
    await page.locator(f"button[data-model='{MODEL}']").click()
    # A locator wait, not wait_for_function: its polling evaluates strings, which the page's CSP forbids.
    await page.locator("td.result", has_text="tokens/s").wait_for(timeout=15_000)
    assert "TTFT" in await page.locator("td.result").text_content()
    await page.screenshot(path=str(shots / "dashboard-models.png"), full_page=True)
    assert problems == []


def test_beyond_loopback_the_dashboard_and_metrics_need_the_token(tmp_path: Path) -> None:
    """Listening on every interface without a token: the dashboard and /metrics do not answer (nor
    does anything else but the health probe); with a token they do, for its bearer."""
    token = "dashboard-token-0123456789"
    for extra, allowed in (({"host": "0.0.0.0"}, False), ({"host": "0.0.0.0", "auth_token": token}, True)):
        data_dir = tmp_path / extra.get("auth_token", "open")
        data_dir.mkdir()
        (data_dir / "config.toml").touch(0o600)  # an inline token is kept only in a private config
        with ServerProcess(ServerConfig(data_dir=data_dir, extra_server=extra)) as proc:
            for path in ("/ui/", "/ui/api/overview", "/metrics"):
                resp = httpx.get(proc.base_url + path, headers={"x-cursor-byok-token": token} if allowed else {}, timeout=5)
                assert resp.status_code == (200 if allowed else 403), (path, resp.text)
                if not allowed:
                    assert "auth token" in resp.text
