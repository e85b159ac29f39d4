"""The viewer in a real browser: list, run page, filter and drill-down, comparison, curve, reward histogram, a
hostile completion shown as text, and a run in progress updating without a reload."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
from playwright.sync_api import Page, expect

from evalsi.runs import journal_path
from tests.view.make import HOSTILE, record, simple_run, write_run


def open_run(page: Page, url: str, name: str) -> None:
    page.goto(url)
    page.get_by_role("link", name=name, exact=True).click()
    expect(page.locator("h1")).to_contain_text(name)


def test_list_then_run_page(page: Page, viewer: str) -> None:
    page.goto(viewer)
    expect(page.locator("#runs tbody tr")).to_have_count(6)
    expect(page.locator("#curves a")).to_have_count(1)
    open_run(page, viewer, "run-b")
    expect(page.locator("#metrics")).to_contain_text("0.8333")
    expect(page.locator("#metrics")).to_contain_text("pass@1/acc")
    expect(page.locator("#gates")).to_contain_text("passed")
    expect(page.locator("#matching")).to_have_text("12 of 12 records")


def test_filter_sort_and_drill_into_a_record(page: Page, viewer: str) -> None:
    open_run(page, viewer, "run-a")
    page.select_option("select[name=metric]", "acc")
    page.select_option("select[name=op]", "lt")
    page.fill("input[name=value]", "1")
    page.click("#filter-form button[type=submit]")
    expect(page.locator("#matching")).to_have_text("6 of 12 records")
    page.get_by_role("link", name="acc", exact=True).click()  # sort by acc
    expect(page.locator("#record-table tbody tr")).to_have_count(6)
    page.fill("input[name=q]", "problem number 9:")
    page.click("#filter-form button[type=submit]")
    expect(page.locator("#matching")).to_have_text("1 of 12 records")
    page.locator("#record-table tbody tr td.prompt a").first.click()
    expect(page.locator("h1")).to_contain_text("Record 9")
    expect(page.locator("#prompt")).to_have_text("problem number 9: what is 9+1?")
    expect(page.locator("section.sample")).to_have_count(2)
    expect(page.locator("#sample-1 pre.completion")).to_have_text("answer 1 for problem 9")
    expect(page.locator("#sample-1 .scores")).to_contain_text("answer 1 of record 9")


def test_compare_two_runs(page: Page, viewer: str) -> None:
    page.goto(viewer)
    form = page.locator("#compare-form")
    form.locator("select[name=a]").select_option(label="run-a (a.results.json)")
    form.locator("select[name=b]").select_option(label="run-b (b.results.json)")
    form.locator("button").click()
    expect(page.locator("#comparison tbody tr").first).to_contain_text("+0.3333*")
    expect(page.get_by_role("heading", name="acc: flipped records (4)", exact=True)).to_be_visible()
    expect(page.locator("tr.flip.improved")).to_have_count(8)


def test_learning_curve_marks_the_regression_and_opens_a_step(page: Page, viewer: str) -> None:
    page.goto(viewer)
    page.locator("#curves a").click()
    chart = page.locator('figure[data-metric="acc"] svg')
    expect(chart.locator("circle.point")).to_have_count(3)
    expect(chart.locator("circle.point.regressed")).to_have_count(1)
    expect(chart.locator("line.base")).to_have_count(1)
    chart.locator('a[data-step="200"]').click()
    expect(page.locator("h1")).to_contain_text("grpo-1 200")


def test_reward_histogram_bar_lists_its_rollouts(page: Page, viewer: str) -> None:
    page.goto(viewer)
    page.get_by_role("link", name="scores.jsonl").click()
    expect(page.locator("#reward-statuses")).to_contain_text("8")
    page.locator('figure[data-series="total"] a[data-bin="19"]').click()
    expect(page.locator("#bin-rollouts tbody tr")).to_have_count(1)
    expect(page.locator("#bin-rollouts")).to_contain_text("q9")


def test_a_hostile_completion_is_shown_as_text(page: Page, viewer: str) -> None:
    open_run(page, viewer, "hostile")
    page.locator("#record-table tbody tr td.prompt a").first.click()
    expect(page.locator("#sample-0 pre.completion")).to_have_text(HOSTILE)
    assert page.title() != "pwned"
    assert page.locator("main script, main img").count() == 0


def test_a_run_in_progress_updates_without_reloading(page: Page, viewer: str, results: Path) -> None:
    path = write_run(results / "live.results.json", "live", [record(0, [True])], status="partial", summary=False)
    journal = journal_path(path)
    journal.write_bytes(orjson.dumps({"fingerprints": {}}) + b"\n")
    open_run(page, viewer, "live")
    expect(page.locator("#run-status")).to_have_text("running")
    expect(page.locator("#matching")).to_have_text("1 of 1 records")
    page.evaluate("window.__sameDocument = true")
    with journal.open("ab") as handle:
        handle.write(orjson.dumps(record(1, [False]).to_json()) + b"\n")
        handle.flush()
        os.fsync(handle.fileno())
    expect(page.locator("#matching")).to_have_text("2 of 2 records", timeout=10_000)
    expect(page.locator("#metrics")).to_contain_text("0.5000")
    assert page.evaluate("window.__sameDocument") is True  # the page was updated, not reloaded


def test_a_curve_shows_a_new_step_without_reloading(page: Page, viewer: str, results: Path) -> None:
    page.goto(viewer)
    page.locator("#curves a").click()
    expect(page.locator('figure[data-metric="acc"] circle.point')).to_have_count(3)
    page.evaluate("window.__sameDocument = true")
    simple_run(
        results / "logs" / "grpo-1" / "forgetting" / "step-300.json",
        "grpo-1 300",
        [True] * 29 + [False] * 11,
        checkpoint={"trainingRun": "grpo-1", "step": 300, "label": "300"},
    )
    expect(page.locator('figure[data-metric="acc"] circle.point')).to_have_count(4, timeout=10_000)
    expect(page.locator("#steps tbody tr")).to_have_count(4)
    assert page.evaluate("window.__sameDocument") is True
