"""The evalsi server's ``/ui`` in a real browser: sign in with a token, see the project's stored runs, open one,
sign out."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.server.harness import ServerProcess, make_token, write_config
from tests.server.runs_data import results_document


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    directory = tmp_path_factory.mktemp("server-ui")
    database = f"sqlite:///{directory / 'server.db'}"
    token = make_token(database, "team-a", ["evaluations.run"])
    other = make_token(database, "team-b", ["evaluations.run"])
    with ServerProcess(write_config(directory, {"database": {"url": database}})) as server:
        for name, owner in (("nightly", token), ("secret-of-b", other)):
            with ThreadPoolExecutor(1) as pool:  # Playwright's loop runs on this thread; the engine needs its own
                document = pool.submit(results_document, Path(directory) / "data", name, 5).result()
            answer = httpx.post(
                f"{server.http}/v1alpha1/runs",
                json={"results": document, "labels": {}},
                headers={"Authorization": f"Bearer {owner}"},
                timeout=60,
            )
            assert answer.status_code == 200, answer.text
        yield server.http, token


def test_sign_in_then_open_a_stored_run(page: Page, served: tuple[str, str]) -> None:
    url, token = served
    page.goto(f"{url}/ui/")
    expect(page).to_have_url(f"{url}/ui/login?next=/ui/")
    page.fill("input[name=token]", "evalsi_wrong")
    page.click("button[type=submit]")
    expect(page.get_by_role("alert")).to_contain_text("unknown or revoked token")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{url}/ui/")
    expect(page.locator("#runs tbody tr")).to_have_count(1)
    expect(page.locator("#runs")).not_to_contain_text("secret-of-b")
    page.get_by_role("link", name="nightly", exact=True).click()
    expect(page.locator("h1")).to_contain_text("nightly")
    expect(page.locator("#matching")).to_have_text("40 of 40 records")
    cookies = page.context.cookies()
    (cookie,) = [c for c in cookies if c["name"] == "evalsi_ui_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert token not in cookie["value"]  # a session id: the token itself never reaches the browser's storage
    assert page.evaluate("document.cookie") == ""  # page scripts cannot read the session either
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{url}/ui/login")
    page.goto(f"{url}/ui/")
    expect(page).to_have_url(f"{url}/ui/login?next=/ui/")  # the session ended: the server forgot it
    replayed = {"Cookie": f"evalsi_ui_session={cookie['value']}"}
    assert httpx.get(f"{url}/ui/api/sources", headers=replayed).status_code == 401
