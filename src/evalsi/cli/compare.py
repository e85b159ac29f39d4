"""``evalsi compare RESULTS_A RESULTS_B``: run B against run A, record by record, for every shared metric."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Group
from rich.markup import escape
from rich.text import Text

from evalsi.cli._console import EXIT_GATE, fail, stderr, stdout
from evalsi.cli._tables import interval_note, number_table
from evalsi.errors import DataError
from evalsi.runs import LoadedRun, MetricComparison, compare_runs, load_results
from evalsi.runs._compare import comparison_to_dict, record_overlap
from evalsi.runs._curve import failed_rules
from evalsi.stats import RegressionRule, describe_method

SHARED_WARNING = 0.9
"""Below this fraction of shared records, compare warns: the runs may not be over the same data."""


def compare_command(
    results_a: Annotated[Path, typer.Argument(help="The results file of run A (the baseline).")],
    results_b: Annotated[Path, typer.Argument(help="The results file of run B (compared with A).")],
    metrics: Annotated[
        list[str] | None, typer.Option("--metric", "-m", help="Compare only this metric (repeatable).")
    ] = None,
    flips: Annotated[int, typer.Option("--flips", help="Flipped records to list per metric.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Exit 2 instead of warning when the runs share under 90% of their records or one of them is partial.",
        ),
    ] = False,
    regression: Annotated[
        list[str] | None,
        typer.Option(
            "--regression",
            metavar="METRIC[:MAX_DROP]",
            help="Exit 3 when B is significantly below A on METRIC by more than MAX_DROP (repeatable).",
        ),
    ] = None,
) -> None:
    """Paired comparison of B against A: per metric, B − A with a 95% CI (* when it excludes 0).

    Records are paired by id (else content hash) and averaged over samples first. Pass/fail metrics also get
    McNemar's exact test and the records that flipped. Warns when the runs share under 90% of their records
    or one is partial (an interrupted run, or records that failed to generate).

    With --regression METRIC[:MAX_DROP], B regressed when the 95% CI of B − A lies below 0 and the drop
    exceeds MAX_DROP (default 0); such a metric is marked ! and the command exits 3, so CI can fail on a drop.

    Exit codes: 0 compared; 2 a file is missing or not a results file, a metric is unknown, or (with --strict)
    a warning was raised; 3 a regression.
    """
    try:
        rules = [RegressionRule.parse(text) for text in regression or []]
    except ValueError as exc:
        fail(f"--regression: {exc}")
    wanted = [*(metrics or []), *(r.metric for r in rules if metrics and r.metric not in metrics)]
    try:
        run_a, run_b = load_results(results_a), load_results(results_b)
        compared = compare_runs(run_a, run_b, wanted or None)
    except DataError as exc:
        fail(str(exc))
    by_metric = {c.metric: c for c in compared}
    for rule in rules:
        if rule.metric not in by_metric:
            fail(f"--regression: the runs share no metric {rule.metric!r} (they share: {', '.join(by_metric)})")
    failed = {r.metric: r for r in failed_rules({m: c.comparison for m, c in by_metric.items()}, rules)}
    warnings = comparison_warnings(run_a, run_b)
    if as_json:
        rows = [comparison_to_dict(c) for c in compared]
        for row in rows:
            if any(r.metric == row["metric"] for r in rules):
                row["regressed"] = row["metric"] in failed
        stdout.out(orjson.dumps(rows).decode(), highlight=False)
    else:
        stdout.print(comparison_table(run_a, run_b, compared, flips, set(failed)))
    for warning in warnings:
        stderr.print(f"[bold yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
    for metric, rule in failed.items():
        d = by_metric[metric].comparison.difference
        stderr.print(
            f"[bold red]regression:[/] {escape(metric)} dropped {-d.mean:.4f} (95% CI of B − A "
            f"[{d.ci_low:+.4f}, {d.ci_high:+.4f}], {describe_method(d.method)}), more than {rule.max_drop:g}",
            highlight=False,
        )
    if warnings and strict:
        fail("--strict: the comparison raised warnings (above)")
    if failed:
        raise typer.Exit(EXIT_GATE)


def comparison_warnings(a: LoadedRun, b: LoadedRun) -> list[str]:
    """What makes a comparison doubtful: few shared records, or a partial run."""
    out = []
    overlap = record_overlap(a, b)
    if overlap.fraction < SHARED_WARNING:
        out.append(
            f"the runs share {overlap.shared} records ({overlap.fraction:.0%} of the larger run; "
            f"{overlap.only_a} only in A, {overlap.only_b} only in B): they may not cover the same data"
        )
    for label, run in (("A", a), ("B", b)):
        if run.status != "complete":
            out.append(
                f"{label} ({run.path}) is a {run.status} run ({len(run.records)} records): rerun it "
                "to finish, or compare knowing it is incomplete"
            )
    return out


def comparison_table(
    run_a: LoadedRun,
    run_b: LoadedRun,
    compared: list[MetricComparison],
    flips: int,
    regressions: set[str] | None = None,
) -> Group:
    """The per-metric table, headed by run names and files (``!`` marks a regression), then the flipped records."""
    regressions = regressions or set()
    rows = []
    details: list[Text] = []
    marked = False
    for item in compared:
        c = item.comparison
        d = c.difference
        mark = "!" if item.metric in regressions else "*" if c.significant else ""
        marked = marked or c.significant
        ci = "-" if math.isnan(d.ci_low) else f"[{d.ci_low:+.4f}, {d.ci_high:+.4f}]"
        improved = sum(1 for f in c.flips if f.direction == "improved")
        flip_text = f"+{improved}/−{len(c.flips) - improved}" if c.mcnemar is not None else "-"
        p = "-" if c.mcnemar is None else f"{c.mcnemar.p_value:.4g}"
        rows.append(
            [
                escape(item.metric),
                _num(c.mean_a),
                _num(c.mean_b),
                f"{_signed(d.mean)}{mark}",
                ci,
                p,
                flip_text,
                str(c.pairs),
            ]
        )
        if c.only_a or c.only_b:
            details.append(
                Text(f"{item.metric}: {c.pairs} pairs; {c.only_a} records only in A, {c.only_b} only in B are left out")
            )
        if c.flips and flips > 0:
            shown = ", ".join(f"{f.key} ({'+' if f.direction == 'improved' else '−'})" for f in c.flips[:flips])
            more = f" … {len(c.flips) - flips} more" if len(c.flips) > flips else ""
            details.append(Text(f"{item.metric} flipped: {shown}{more}"))
    title = f"B = {escape(run_b.name)} ({escape(run_b.path)}) vs A = {escape(run_a.name)} ({escape(run_a.path)})"
    columns = ("metric", "A", "B", "B − A", "95% CI", "McNemar p", "flips", "pairs")
    notes = ["* the 95% CI of B − A excludes 0"] if marked else []
    if regressions:
        notes.append("! a regression")
    if any(item.comparison.mcnemar is not None for item in compared):
        notes.append("flips: records that went +right or −wrong")
    method_note = interval_note((item.metric, item.comparison.difference.method) for item in compared)
    if method_note is not None:
        notes.append(method_note)
    table = number_table(title, columns, columns[1:], rows, caption="; ".join(notes) or None)
    return Group(table, *details)


def _num(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.4f}"


def _signed(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:+.4f}"
