"""The dashboard says on every page when capture is on (a real browser, the real server)."""
from __future__ import annotations

from pathlib import Path

from playwright.async_api import async_playwright

from tests.e2e.test_browser import CHROMIUM
from tests.fakes import FakeProviderServer
from tests.harness.capture import capturing
from tests.harness.server import ServerProcess

from .test_capture_replay import config


async def test_every_page_shows_a_banner_while_capture_is_on(tmp_path: Path, provider: FakeProviderServer) -> None:
    with ServerProcess(config(tmp_path, provider)) as server:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
            try:
                page = await browser.new_page()
                async with capturing(server):
                    for name in ("overview", "models"):
                        await page.goto(f"{server.base_url}/ui/#/{name}")
                        banner = page.locator("#capture")
                        await banner.filter(has_text="Capture is ON (redacted)").wait_for(state="visible", timeout=15_000)
                        assert str(tmp_path) in await banner.inner_text()
                await page.reload()
                await page.wait_for_selector("body[data-ready='models']", timeout=15_000)
                await page.locator("#capture").wait_for(state="hidden", timeout=15_000)
            finally:
                await browser.close()
