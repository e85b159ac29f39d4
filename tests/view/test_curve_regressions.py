"""The viewer's regression marks are the one rule, evalsi.stats.is_regression, whatever the page's MAX_DROP."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from evalsi.runs import load_run_result
from evalsi.stats import is_regression
from evalsi.view import create_app
from evalsi.view._curves import load_curve
from tests.view.conftest import ids
from tests.view.make import record, write_run


def curve_dir(root: Path, steps: dict[int | None, list[bool]]) -> Path:
    """A training run's step files (None: the base), each record right or wrong in both of its two samples."""
    folder = root / "logs" / "grpo-1" / "forgetting"
    folder.mkdir(parents=True)
    for step, correct in steps.items():
        label = "base" if step is None else str(step)
        write_run(
            folder / ("base.json" if step is None else f"step-{step}.json"),
            f"grpo-1 {label}",
            [record(i, [c, c]) for i, c in enumerate(correct)],
            checkpoint={"trainingRun": "grpo-1", "step": step, "label": label},
        )
    return folder


BASE = [True] * 20 + [False] * 20
BETTER = [True] * 26 + [False] * 14  # the base's right answers and six more: a small significant improvement
WORSE = [True] * 8 + [False] * 32  # twelve fewer: a significant drop


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return curve_dir(tmp_path, {None: BASE, 100: BETTER, 200: WORSE})


def read(path: Path) -> tuple[dict[str, object], dict[str, object], str]:
    result = load_run_result(path, records=False)
    summary = result.summary.model_dump(by_alias=True) if result.summary is not None else {}
    return result.header_json(), summary, result.status


def test_a_significant_improvement_is_no_regression_even_with_a_negative_drop(folder: Path, tmp_path: Path) -> None:
    """The inline rule (significant and base − step > MAX_DROP) marked a small, significant gain under drop -0.2."""
    curve = load_curve(folder, read, max_drop=-0.2)
    better = next(p for p in curve.points if p.step == 100)
    difference = better.changes["acc"].difference
    assert better.changes["acc"].significant and difference.ci_low > 0 and difference.mean == pytest.approx(0.15)
    assert not better.regressed_on("acc")
    client = TestClient(create_app([tmp_path]))
    cid = next(iter(ids(client.get("/").text, "curves").values()))
    data = client.get(f"/api/curves/{cid}", params={"drop": "-0.2"}).json()
    marks = {p["step"]: p["versusBase"]["acc"]["regressed"] for p in data["points"] if p["step"] != "base"}
    assert marks == {100: False, 200: True}


def test_the_marks_agree_with_the_rule_on_its_boundaries(folder: Path) -> None:
    worse = next(p for p in load_curve(folder, read).points if p.step == 200)
    drop = -worse.changes["acc"].difference.mean
    assert drop == pytest.approx(0.3)
    for max_drop in (-0.2, 0.0, drop - 1e-9, drop, drop + 1e-9, 1.0):
        for point in load_curve(folder, read, max_drop=max_drop).points:
            for metric, comparison in point.changes.items():
                expected = is_regression(comparison.difference, max_drop)
                assert point.regressed_on(metric) is expected, (point.step, metric, max_drop)
    marked = {m for m in (drop - 1e-9, drop) if any(p.regressed for p in load_curve(folder, read, m).points)}
    assert marked == {drop - 1e-9}  # a drop of exactly MAX_DROP is allowed; a hair more is a regression
