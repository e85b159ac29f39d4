"""The viewer in a real browser: list, run page, filter and drill-down, comparison, curve, reward histogram, a
hostile completion shown as text, and a run in progress updating without a reload."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import orjson
from playwright.sync_api import Page, expect

from evalsi.runs._results import ResultsWriter, journal_path
from tests.view.make import HOSTILE, record, simple_run, write_run


def open_run(page: Page, url: str, name: str) -> None:
    page.goto(url)
    page.get_by_role("link", name=name, exact=True).click()
    expect(page.locator("h1")).to_contain_text(name)


def test_list_then_run_page(page: Page, viewer: str) -> None:
    page.goto(viewer)
    expect(page.locator("#runs tbody tr")).to_have_count(3)  # the training run's steps are listed under it
    expect(page.locator('section[data-training-run="grpo-1"] tbody tr')).to_have_count(3)
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
    expect(chart.locator("circle.point")).to_have_count(2)  # the steps; the base is the dashed line
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
    expect(page.locator('figure[data-metric="acc"] circle.point')).to_have_count(2)
    page.evaluate("window.__sameDocument = true")
    simple_run(
        results / "logs" / "grpo-1" / "forgetting" / "step-300.json",
        "grpo-1 300",
        [True] * 29 + [False] * 11,
        checkpoint={"trainingRun": "grpo-1", "step": 300, "label": "300"},
    )
    expect(page.locator('figure[data-metric="acc"] circle.point')).to_have_count(3, timeout=10_000)
    expect(page.locator("#steps tbody tr")).to_have_count(4)
    assert page.evaluate("window.__sameDocument") is True


def test_training_runs_are_grouped_overlaid_and_their_steps_in_numeric_order(
    page: Page, viewer: str, results: Path
) -> None:
    for name, steps in (("grpo-2", {None: 30, 120: 33, 30: 35, 34: 36}),):
        folder = results / "logs" / name / "forgetting"
        folder.mkdir(parents=True)
        for step, correct in steps.items():
            label = "base" if step is None else str(step)
            simple_run(
                folder / ("base.json" if step is None else f"step-{step}.json"),
                f"{name} {label}",
                [True] * correct + [False] * (40 - correct),
                checkpoint={"trainingRun": name, "step": step, "label": label},
            )
    page.goto(viewer)
    expect(page.locator("section.training h2")).to_have_text(["grpo-1", "grpo-2"])
    expect(page.locator('section[data-training-run="grpo-2"] tbody tr')).to_have_count(4)
    steps = page.locator('section[data-training-run="grpo-2"] tbody tr td.num:first-child')
    expect(steps).to_have_text(["base", "30", "34", "120"])
    chart = page.locator('figure[data-spec="forgetting"] svg')
    expect(chart.locator("polyline.line")).to_have_count(2)  # both training runs on one chart
    expect(chart.locator("line.base")).to_have_count(2)
    expect(page.locator('figure[data-spec="forgetting"] ul.legend li')).to_have_text(["grpo-1", "grpo-2"])
    box30 = chart.locator('circle.series-1[data-step="30"]').bounding_box()
    box34 = chart.locator('circle.series-1[data-step="34"]').bounding_box()
    box120 = chart.locator('circle.series-1[data-step="120"]').bounding_box()
    assert box30 and box34 and box120
    assert (box34["x"] - box30["x"]) < (box120["x"] - box34["x"]) / 10  # 4 steps apart, not one slot
    page.select_option("#metric-picker", "pass@1/acc")  # the picker shows another metric at once
    expect(page.locator('figure[data-spec="forgetting"] figcaption')).to_have_text("forgetting · pass@1/acc")


def test_a_run_in_progress_fills_in_on_the_list_without_reloading(page: Page, viewer: str, results: Path) -> None:
    header = {"name": "live-run", "fingerprints": {}, "spec": {}, "metrics": [{"name": "acc", "threshold": 1.0}]}
    writer = ResultsWriter(results / "live.results.json", {**header, "onError": "zero"})
    writer.begin(3)
    page.goto(viewer)
    row = page.locator("#runs tr", has_text="live-run")
    expect(row).to_contain_text("0 of 3 records")
    page.evaluate("window.__sameDocument = true")
    writer.append([record(0, [True])])
    expect(row).to_contain_text("1 of 3 records", timeout=10_000)
    writer.append([record(1, [True]), record(2, [False])])
    expect(row).to_contain_text("3 of 3 records", timeout=10_000)
    writer.close(remove_journal=False)
    assert page.evaluate("window.__sameDocument") is True


def training_run(results: Path, name: str, output: str, log: list[dict[str, float]]) -> None:
    """A training run's base and steps 100 and 300 evaluated (accuracy 30, 28, 20 of 40), the checkpoints under
    ``results/OUTPUT``, and the trainer's ``log`` in step 300's ``trainer_state.json``."""
    out = results / output
    folder = results / "logs" / name / "gsm"
    folder.mkdir(parents=True)
    for step, correct in ((None, 30), (100, 28), (300, 20)):
        label = "base" if step is None else str(step)
        location = "base-model" if step is None else str(out / f"checkpoint-{step}")
        simple_run(
            folder / ("base.json" if step is None else f"step-{step}.json"),
            f"{name} {label}",
            [True] * correct + [False] * (40 - correct),
            checkpoint={"trainingRun": name, "step": step, "label": label, "location": location},
        )
    (out / "checkpoint-300").mkdir(parents=True)
    (out / "checkpoint-300" / "trainer_state.json").write_bytes(orjson.dumps({"log_history": log}))


def test_the_training_reward_is_drawn_beside_the_evaluations_on_the_same_steps(
    page: Page, viewer: str, results: Path, shoot: Callable[[Page, str], Path]
) -> None:
    log = [
        {"step": s, "reward": s / 300, "rewards/gsm/mean": s / 300, "rewards/gsm/format/mean": 1.0}
        for s in range(10, 301, 10)
    ]
    training_run(results, "grpo-3", "trainer-out", log)
    page.goto(viewer)
    page.locator("#curves a", has_text="grpo-3").click()
    rewards = page.locator("#reward-stream figure.reward-box")
    expect(rewards).to_have_count(3)
    expect(rewards.locator("figcaption")).to_have_text(["reward", "gsm", "gsm/format"])
    evals = page.locator('figure[data-metric="acc"] svg')
    reward = page.locator('figure.reward-box[data-series="reward"] svg')
    expect(reward.locator("polyline.line")).to_have_count(1)
    for attribute in ("data-x-min", "data-x-max"):
        assert evals.get_attribute(attribute) == reward.get_attribute(attribute)
    # the reward's step 300 sits right above the evaluation of step 300, and its step 100 above step 100
    xs = reward.locator("polyline.line").evaluate("line => Array.from(line.points, p => p.x)")
    assert len(xs) == 30
    for step, index in ((100, 9), (300, 29)):
        cx = float(evals.locator(f'circle.point[data-step="{step}"]').get_attribute("cx") or "nan")
        assert abs(xs[index] - cx) < 0.2, (step, xs[index], cx)
    assert page.locator("p.reward-note").count() == 0
    shoot(page, "view-reward-stream")


def test_a_fired_monitor_is_marked_under_the_reward_on_the_evaluations_steps(
    page: Page, viewer: str, results: Path, shoot: Callable[[Page, str], Path]
) -> None:
    log = [
        {
            "step": s,
            "reward": s / 300,
            "monitor/length_drift": 1.0 + s / 300,
            "monitor/length_drift/fired": 1.0 if s >= 200 else 0.0,
            "monitor/zero_variance_groups": 0.1,
            "monitor/zero_variance_groups/fired": 0.0,
        }
        for s in range(10, 301, 10)
    ]
    training_run(results, "grpo-4", "trainer-out-monitors", log)
    page.goto(viewer)
    page.locator("#curves a", has_text="grpo-4").click()
    expect(page.locator("h2#monitors")).to_be_visible()
    boxes = page.locator("#monitor-charts figure.monitor-box")
    expect(boxes).to_have_count(2)
    expect(boxes.locator("figcaption")).to_contain_text(["length_drift", "zero_variance_groups"])
    evals = page.locator('figure[data-metric="acc"] svg')
    drift = page.locator('figure.monitor-box[data-signal="length_drift"] svg')
    for attribute in ("data-x-min", "data-x-max"):
        assert evals.get_attribute(attribute) == drift.get_attribute(attribute)
    # the threshold line (length_ratio 1.5) is drawn, and the steps the monitor fired at are red points
    expect(drift.locator("line.threshold")).to_have_attribute("data-threshold", "1.5")
    fired = drift.locator("circle.fired")
    expect(fired).to_have_count(11)  # steps 200 to 300
    last = drift.locator('circle.fired[data-step="300"]')
    expect(last).to_be_visible()
    assert last.evaluate("c => getComputedStyle(c).fill") == "rgb(198, 40, 40)"  # the stylesheet's --bad
    # ... right below the evaluation of the same step, on the same x
    cx = float(evals.locator('circle.point[data-step="300"]').get_attribute("cx") or "nan")
    assert abs(float(last.get_attribute("cx") or "nan") - cx) < 0.2
    expect(page.locator('figure.monitor-box[data-signal="zero_variance_groups"] circle.fired')).to_have_count(0)
    row = page.locator('#monitors-fired tr[data-signal="length_drift"] td')
    expect(row).to_have_text(["length_drift", "200", "1.667", "≥ 1.5 (length_ratio)"])
    shoot(page, "view-monitors")
