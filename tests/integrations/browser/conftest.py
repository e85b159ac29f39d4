"""Browser tests drive the system's Chromium through Playwright: they run in the ``browser`` nox session, which
installs both and sets ``EVALSI_INTEGRATION``; the core suite does not collect them."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("EVALSI_INTEGRATION"):
    collect_ignore_glob = ["*"]
else:
    from playwright.sync_api import Browser, Page, sync_playwright

    from evalsi.view import create_app
    from tests.rewards._servers import ServerThread
    from tests.view.make import build_results

    CHROMIUM = os.environ.get("EVALSI_CHROMIUM", "/usr/bin/chromium")
    ARGS = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
    ]

    @pytest.fixture(scope="session")
    def browser() -> Iterator[Browser]:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            yield browser
            browser.close()

    @pytest.fixture
    def results(tmp_path: Path) -> Path:
        return build_results(tmp_path / "results")

    @pytest.fixture
    def viewer(results: Path) -> Iterator[str]:
        """The viewer on a real loopback server, as ``evalsi view`` serves it."""
        app = create_app([results], allowed_hosts=["127.0.0.1", "localhost"])
        with ServerThread(app) as server:
            yield server.url

    @pytest.fixture
    def shoot(tmp_path: Path) -> Callable[[Page, str], Path]:
        """Screenshot the page as ``NAME.png`` into ``EVALSI_SCREENSHOTS`` (the manual's docs/images), else a
        temporary directory; either way checked to be a PNG."""

        def take(page: Page, name: str) -> Path:
            out = Path(os.environ.get("EVALSI_SCREENSHOTS") or tmp_path)
            out.mkdir(parents=True, exist_ok=True)
            path = out / f"{name}.png"
            page.screenshot(path=str(path), full_page=True)
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            return path

        return take

    @pytest.fixture
    def page(browser: Browser) -> Iterator[Page]:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        errors: list[Any] = []
        page.on("pageerror", lambda error: errors.append(error))
        yield page
        context.close()
        assert errors == [], f"JavaScript errors: {errors}"
