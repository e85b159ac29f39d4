"""Summaries printed at 80 columns (a CI log): every number whole, long names folded instead."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from rich.console import Console, RenderableType

import evalsi.rewards
from evalsi.cli._summary import reward_summary
from evalsi.cli.compare import comparison_table
from evalsi.cli.run import run_summary
from evalsi.runs import GateResult, LoadedRun, MetricComparison, RunOutcome, RunSummary
from evalsi.stats import Estimate, paired_comparison

LONG = "pass@16/math-equiv-with-a-rather-long-component-name"


def render(renderable: RenderableType, width: int = 80) -> str:
    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    console.print(renderable)
    return console.export_text()


def numbers(text: str) -> list[str]:
    return re.findall(r"[+-]?\d+\.\d+", text)


def test_run_summary_keeps_numbers_whole_at_80_columns() -> None:
    est = Estimate(0.612345, 0.012345, 0.587654, 0.637777, 12000, 10000)
    summary = RunSummary(
        {"math-equiv": est, LONG: est, "format": est},
        {"math-equiv": Counter(ok=11000, skipped=500, error=500), "format": Counter(ok=12000)},
        [GateResult(LONG, 0.612345, 0.5, None, True)],
    )
    outcome = RunOutcome(Path("runs/qwen3-8b-math500-step-1200-with-a-long-name.results.json"), summary, [])
    text = render(run_summary(outcome))
    assert "…" not in text and all(len(line) <= 80 for line in text.splitlines())
    for whole in ("0.6123", "[0.5877, 0.6378]", "0.0123", "10000", "11000", "12000", "500"):
        assert whole in text, whole
    assert numbers(text).count("0.6123") == 4  # three metrics and the gate, none cut
    metric_lines = [line for line in text.splitlines() if line.startswith("pass@16/")]
    assert any(LONG not in line and "0.6123" in line for line in metric_lines)  # the name folds, numbers stay


def test_reward_summary_keeps_numbers_whole_at_80_columns() -> None:
    reward = evalsi.rewards.from_mapping(
        {
            "components": [
                {"ref": "contains", "name": "a-component-with-a-very-long-descriptive-name", "weight": 0.3333},
                {"ref": "exact-match", "name": "exact", "weight": 0.6667, "gate": True, "threshold": 0.5},
            ],
        }
    )
    rollouts = [{"completion": f"answer {i}", "answer": str(i % 3)} for i in range(300)]
    text = render(reward_summary(reward, reward.score(rollouts)))
    assert "…" not in text and all(len(line) <= 80 for line in text.splitlines())
    for whole in ("0.3333", "0.6667", ">= 0.5", "300"):
        assert whole in text, whole


def test_comparison_keeps_numbers_whole_at_80_columns() -> None:
    a = {f"r{i}": [float(i % 2)] for i in range(400)}
    b = {f"r{i}": [float(i % 3 == 0)] for i in range(400)}
    compared = [MetricComparison(LONG, paired_comparison(a, b)), MetricComparison("exact", paired_comparison(a, a))]
    run_a = LoadedRun("runs/baseline-checkpoint.results.json", "baseline", [], [], "zero", [])
    run_b = LoadedRun("runs/step-1200-checkpoint.results.json", "step-1200", [], [], "zero", [])
    text = render(comparison_table(run_a, run_b, compared, flips=0))
    assert "…" not in text and all(len(line) <= 80 for line in text.splitlines())
    c = compared[0].comparison
    for whole in (
        f"{c.mean_a:.4f}",
        f"{c.mean_b:.4f}",
        f"{c.difference.mean:+.4f}*",
        f"[{c.difference.ci_low:+.4f}, {c.difference.ci_high:+.4f}]",
        "400",
    ):
        assert whole in text, whole
    assert "runs/baseline-checkpoint.results.json" in text and "excludes 0" in text
    # The 95% interval of a difference of pass rates is Newcombe's, and the table says so.
    assert c.difference.method == "newcombe" and -1.0 <= c.difference.ci_low <= c.difference.ci_high <= 1.0
    assert "95% CI: Newcombe's paired score interval" in " ".join(text.split())
