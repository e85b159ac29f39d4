"""Screenshots of the main pages, over a real ``evalsi run`` results file and a real ``evalsi rewards score``
output beside the generated runs and curve. EVALSI_SCREENSHOTS=DIR keeps them there (the README shows
docs/images); otherwise they go to a temporary directory and are only checked to be images."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from evalsi.view import create_app
from tests.rewards._servers import ServerThread

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "finetuning"


def evalsi(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "evalsi", *args], check=True, capture_output=True)


@pytest.fixture
def showcase(results: Path) -> Iterator[str]:
    evalsi("run", "-q", "-f", str(EXAMPLES / "math-run.yaml"), "-o", str(results / "gsm-toy.results.json"))
    evalsi(
        "rewards",
        "score",
        "-q",
        "-s",
        str(EXAMPLES / "math-reward.yaml"),
        "-d",
        str(EXAMPLES / "math-rollouts.jsonl"),
        "-o",
        str(results / "math.scores.jsonl"),
    )
    with ServerThread(create_app([results])) as server:
        yield server.url


def test_screenshots_of_the_main_pages(page: Page, showcase: str, tmp_path: Path) -> None:
    out = Path(os.environ.get("EVALSI_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    shots: list[Path] = []

    def shot(name: str) -> None:
        path = out / f"view-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        shots.append(path)

    page.goto(showcase)
    shot("list")
    page.get_by_role("link", name="gsm-toy", exact=True).click()
    expect(page.locator("#metrics")).to_contain_text("pass@8/math-equiv")
    cells = page.locator("#counts tbody tr").first.locator("td")
    expect(cells).to_have_text(["math-equiv", "64", "0", "0"])  # every sample scored: ok 64, no error or skip
    shot("run")
    page.locator("#record-table tbody tr td.prompt a").nth(2).click()
    expect(page.locator("section.sample")).to_have_count(8)
    page.set_viewport_size({"width": 1280, "height": 1100})
    page.screenshot(path=str(out / "view-record.png"))  # the first samples, not all eight
    shots.append(out / "view-record.png")
    page.goto(showcase)
    form = page.locator("#compare-form")
    form.locator("select[name=a]").select_option(label="run-a (a.results.json)")
    form.locator("select[name=b]").select_option(label="run-b (b.results.json)")
    form.locator("button").click()
    expect(page.locator("#comparison")).to_be_visible()
    page.screenshot(path=str(out / "view-compare.png"))
    shots.append(out / "view-compare.png")
    page.goto(showcase)
    page.locator("#curves a").click()
    expect(page.locator("circle.point.regressed").first).to_be_visible()
    shot("curve")
    page.goto(showcase)
    page.get_by_role("link", name="math.scores.jsonl").click()
    page.locator('figure[data-series="total"] a.bar-link').last.click()
    expect(page.locator("#bin-rollouts")).to_be_visible()
    shot("rewards")
    for path in shots:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
