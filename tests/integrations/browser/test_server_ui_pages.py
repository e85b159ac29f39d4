"""The evalsi server's ``/ui`` pages of evaluators and evaluation jobs in a real browser: from the evaluator list
to a build log, and from a job to its results opened as a run."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.server.evaluation import CAPITALS, TERMINAL, chat, create_job, jsonl, post, upload, wait_built, wait_state
from tests.server.harness import ServerProcess, make_token, write_config

Shoot = Callable[[Page, str], Path]
ALL = ["evaluations.run", "resource.runs_code", "evaluators.write"]
ROWS = [chat("Capital of France?", "It is Paris.", "Paris"), chat("Capital of Japan?", "Kyoto", "Tokyo")]


def _prepare(server: ServerProcess, token: str, other: str) -> None:
    entry = "test_capitals.py::test_capitals"
    assert upload(server, token, "capitals", {"test_capitals.py": CAPITALS}, entry).status_code == 200
    broken = {"test_broken.py": "import nonexistent_module_for_this_test\n"}
    assert upload(server, token, "broken", broken, "test_broken.py::test_x").status_code == 200
    assert upload(server, other, "b-secret", broken, "test_broken.py::test_x").status_code == 200
    assert post(server, token, "datasets", {"datasetId": "capitals", "jsonl": jsonl(ROWS)}).is_success
    for evaluator_id in ("capitals", "broken"):
        assert wait_built(server, token, evaluator_id, timeout=240)["state"] != "BUILDING"
    assert create_job(server, token, "scored", "capitals", "capitals", "scored-out").status_code == 200
    assert wait_state(server, token, "scored", TERMINAL, timeout=240)["state"] == "COMPLETED"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    directory = tmp_path_factory.mktemp("server-ui-pages")
    database = f"sqlite:///{directory / 'server.db'}"
    storage = Path(tempfile.mkdtemp(prefix="evalsi-ui-browser-"))  # under /tmp: sandbox users must reach it
    token = make_token(database, "team-a", ALL)
    other = make_token(database, "team-b", ALL)
    spec = {"database": {"url": database}, "evaluators": {"storage_dir": str(storage)}}
    with ServerProcess(write_config(directory, spec)) as server:
        with ThreadPoolExecutor(1) as pool:  # Playwright's loop runs on this thread; the calls wait on their own
            pool.submit(_prepare, server, token, other).result()
        yield server.http, token
    shutil.rmtree(storage, ignore_errors=True)


def _sign_in(page: Page, url: str, token: str, path: str) -> None:
    page.goto(f"{url}/ui{path}")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{url}/ui{path}")


def test_from_the_evaluator_list_to_a_build_log(page: Page, served: tuple[str, str], shoot: Shoot) -> None:
    url, token = served
    _sign_in(page, url, token, "/")
    page.get_by_role("link", name="Evaluators", exact=True).click()
    expect(page).to_have_url(f"{url}/ui/evaluators")
    expect(page.locator("#evaluators tbody tr")).to_have_count(2)
    expect(page.locator("#evaluators")).not_to_contain_text("b-secret")
    expect(page.locator("#evaluators tr", has_text="capitals")).to_contain_text("ACTIVE")
    shoot(page, "server-evaluators")
    page.get_by_role("link", name="broken", exact=True).click()
    expect(page.locator("h1")).to_have_text("Evaluator broken")
    expect(page.locator("#state")).to_have_text("BUILD_FAILED")
    expect(page.locator("#build-log")).to_contain_text("nonexistent_module_for_this_test")
    shoot(page, "server-build-log")
    page.goto(f"{url}/ui/evaluators/b-secret")  # another project's, by its id
    expect(page.locator("h1")).to_have_text("404")


def test_from_a_job_to_its_results_as_a_run(page: Page, served: tuple[str, str], shoot: Shoot) -> None:
    url, token = served
    _sign_in(page, url, token, "/jobs")
    row = page.locator("#jobs tr", has_text="scored")
    expect(row).to_contain_text("COMPLETED")
    expect(row).to_contain_text("2 of 2 rows")
    row.get_by_role("link", name="scored", exact=True).click()
    expect(page.locator("h1")).to_have_text("Evaluation job scored")
    expect(page.locator("#progress")).to_contain_text("2 of 2 rows")
    shoot(page, "server-job")
    page.locator("#results").click()
    expect(page.locator("h1")).to_contain_text("job scored")
    expect(page.locator("#matching")).to_have_text("2 of 2 records")
