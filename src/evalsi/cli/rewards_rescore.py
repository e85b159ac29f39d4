"""``evalsi rewards rescore``: stored rollouts scored under a new spec, and which verdicts flipped."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import typer
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.text import Text

from evalsi.cli._console import EXIT_FAILED, EXIT_GATE, fail, stderr
from evalsi.cli._tables import number_table
from evalsi.errors import DataError, RewardBatchError, SpecError
from evalsi.evaluators import Score
from evalsi.rewards import (
    ComponentDiff,
    RescoreReport,
    Reward,
    StoredRollout,
    load,
    read_rollout_file,
    read_scores,
    rescore,
    score_keys,
    stored_from_scores,
    write_jsonl,
)
from evalsi.rewards.wire import result_json
from evalsi.specs import load_resources


def rescore_command(
    spec: Path = typer.Option(..., "--spec", "-s", help="The new RewardSpec (or a RunSpec: its evaluators)."),
    data: Path = typer.Option(
        ...,
        "--data",
        "-d",
        help="A scores file written with `rewards score --keep-rollouts`, a run's results file, or rollouts "
        "(with --old).",
    ),
    old: Path | None = typer.Option(
        None, "--old", help="The old scores (`rewards score --output`), line for line with the --data rollouts."
    ),
    run_spec: Path | None = typer.Option(
        None,
        "--run-spec",
        help="For a run's results file: the RunSpec that made it, whose dataset gives each record's other fields "
        "(test cases), which results files do not keep.",
    ),
    name: str | None = typer.Option(None, "--name", help="Which spec, when the file holds several."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the new scores here (with rollouts and content keys, for later rescores)."
    ),
    examples: int = typer.Option(3, "--examples", min=0, help="Changed rollouts to show per component and direction."),
    fail_on_flip: bool = typer.Option(False, "--fail-on-flip", help="Exit 3 when any verdict changed."),
    max_flip_rate: float | None = typer.Option(
        None, "--max-flip-rate", min=0.0, max=1.0, help="Exit 3 when more than this share of rollouts changed."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the diff as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No table on stderr."),
) -> None:
    """Score stored rollouts with a new spec and report what changed against their old scores.

    Per component: rollouts whose verdict changed (up, down, or a status change such as ok to skipped), with
    examples, and the change in the mean with a 95% interval paired by rollout; the same for the total. Old
    scores are reused where a component's content key (evaluator and version, params, the fields it reads) is
    unchanged: scores files written with `rewards score --keep-rollouts` record those keys.

    Exit codes: 0 re-scored; 3 with --fail-on-flip (or --max-flip-rate) when verdicts changed; 1 the batch
    failed (a component errored under onError: raise); 2 bad usage, spec or data.
    """
    try:
        reward = _load_spec(spec, name)
        stored = _load_stored(data, old, run_spec, reward)
    except (SpecError, DataError) as exc:
        fail(str(exc))
    if not stored:
        fail(f"{data}: no rollouts to re-score")
    try:
        report = rescore(reward, stored)
    except DataError as exc:
        fail(str(exc))
    except RewardBatchError as exc:
        where = f"rollout {exc.index}: component {exc.component!r} errored: {exc.cause}"
        fail(f"the batch failed, nothing was written: {where}", EXIT_FAILED)
    if output is not None:
        write_jsonl(output, _lines(reward, report, stored))
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(report.to_json(examples), option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
    if not quiet:
        stderr.print(rescore_view(report, examples))
        if output is not None:
            stderr.print(f"wrote {len(stored)} results to {output}", highlight=False)
    threshold = 0.0 if fail_on_flip else max_flip_rate
    if threshold is not None and report.changed_rollouts and report.flip_rate > threshold:
        raise typer.Exit(EXIT_GATE)


def _load_spec(spec: Path, name: str | None) -> Reward:
    kinds = {resource.kind for resource in load_resources(spec)}
    if "RewardSpec" not in kinds and "RunSpec" in kinds:
        from evalsi.runs import load_run

        return load_run(spec, name).reward
    return load(spec, name)


def _load_stored(data: Path, old: Path | None, run_spec: Path | None, reward: Reward) -> list[StoredRollout]:
    results = _run_results(data)
    if results is not None:
        if old is not None:
            raise DataError(
                "a run's results file carries its scores: give it alone as --data, without --old", file=str(old)
            )
        return _from_run(results, str(data), run_spec, reward)
    if run_spec is not None:
        raise DataError("--run-spec applies to a run's results file only", file=str(data))
    rows, source = read_rollout_file(data)
    if old is None:
        if rows and "components" not in rows[0]:
            raise DataError(
                "holds rollouts without scores: give their old scores with --old SCORES (the rewards score output)",
                file=str(data),
            )
        return stored_from_scores(read_scores(rows, source), source)
    old_rows, old_source = read_rollout_file(old)
    return stored_from_scores(read_scores(old_rows, old_source), old_source, rows, source)


def _run_results(path: Path) -> dict[str, Any] | None:
    """The document of a run's results file, or None when ``path`` is something else (JSONL, a JSON array)."""
    if path.suffix.lower() != ".json" or not path.is_file():
        return None
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("kind") != "RunResults":
        return None
    from evalsi.runs._results import read_results

    return read_results(path)  # the version check, with its error naming the file


def _from_run(results: Mapping[str, Any], file: str, run_spec: Path | None, reward: Reward) -> list[StoredRollout]:
    """A rollout per sample of a run's results: its prompt, completion, reference and scores by metric."""
    from evalsi.runs import RecordResult, load_run
    from evalsi.runs._driver import load_run_items

    try:
        records = [RecordResult.from_json(raw) for raw in results.get("records") or []]
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"malformed results file: {exc}", file=file) from None
    metadata: dict[str, Mapping[str, Any]] = {}
    if run_spec is not None:
        metadata = {item.key: item.metadata for item in load_run_items(load_run(run_spec))}
    reference_field = reward.spec.spec.reference_field or "reference"
    stored: list[StoredRollout] = []
    for record in records:
        for number, sample in enumerate(record.samples):
            rollout: dict[str, Any] = {**metadata.get(record.key, {}), "prompt": record.prompt}
            rollout["completion"] = sample.completion
            if record.reference is not None:
                rollout[reference_field] = record.reference
            if sample.tokens is not None:
                rollout["completion_tokens"] = sample.tokens
            label = record.key if len(record.samples) == 1 else f"{record.key}#{number + 1}"
            stored.append(StoredRollout(len(stored), rollout, dict(sample.scores), id=label))
    return stored


def _lines(reward: Reward, report: RescoreReport, stored: Sequence[StoredRollout]) -> list[dict[str, Any]]:
    keys = score_keys(reward, report.records)
    out: list[dict[str, Any]] = []
    for position, (item, result) in enumerate(zip(stored, report.results, strict=True)):
        line: dict[str, Any] = dict(result_json(result, position, record_id=item.id))
        line["rollout"] = dict(item.rollout)
        line["keys"] = keys[position]
        out.append(line)
    return out


def rescore_view(report: RescoreReport, examples: int) -> RenderableType:
    """The diff table (a row per component, then the total), the examples, and a summary line."""
    columns = ["component", "evaluator", "verdicts", "changed", "up", "down", "status", "reused", "old", "new"]
    columns.append("new - old")
    rows = [_row(diff) for diff in report.components]
    if report.total is not None:
        rows.append(_row(report.total))
    table = number_table(
        f"re-scored {report.rollouts} rollouts with {escape(repr(report.spec))}",
        columns,
        ("changed", "up", "down", "status", "reused", "old", "new"),
        rows,
        "new - old: mean difference over the rollouts decided both times, with its 95% interval paired by rollout "
        "(* excludes 0).",
    )
    parts: list[RenderableType] = [table]
    for diff in [*report.components, *([report.total] if report.total else [])]:
        parts += _examples(diff, examples)
    parts.append(
        Text(
            f"{report.changed_rollouts} of {report.rollouts} rollouts judged differently ({report.flip_rate:.1%}); "
            f"{report.reused} component scores reused from the old scores, {report.computed} computed"
        )
    )
    if report.keyed < report.rollouts:
        parts.append(
            Text(
                f"note: {report.rollouts - report.keyed} of {report.rollouts} old scores carry no content keys, so "
                "none of theirs could be reused; write scores with `evalsi rewards score --keep-rollouts` (or "
                "`rewards rescore --output`) to reuse unchanged components next time",
                style="yellow",
            )
        )
    return Group(*parts)


def _row(diff: ComponentDiff) -> list[str]:
    comparison = diff.comparison
    if comparison is None or not comparison.pairs:
        old_mean = delta = "-"
        new_mean = _number(diff.new_mean)
    else:
        old_mean, new_mean = _number(comparison.mean_a), _number(comparison.mean_b)
        d = comparison.difference
        star = "*" if comparison.significant else ""
        interval = "" if math.isnan(d.ci_low) else f" [{d.ci_low:+.4f}, {d.ci_high:+.4f}]"
        delta = f"{d.mean:+.4f}{star}{interval}"
    verdict = {"changed": "[bold yellow]changed[/]", "unchanged": "[green]unchanged[/]"}.get(diff.kind, diff.kind)
    counts = [str(len(diff.changes)), str(diff.up), str(diff.down), str(diff.status_changes)]
    if diff.kind in ("added", "removed"):
        counts = ["-"] * 4
    names = [escape(diff.name), escape(diff.evaluator or "-"), verdict]
    return [*names, *counts, str(diff.reused), old_mean, new_mean, delta]


def _examples(diff: ComponentDiff, examples: int) -> list[RenderableType]:
    out: list[RenderableType] = []
    for direction in ("down", "up", "status"):
        picked = [c for c in diff.changes if c.direction == direction][:examples]
        for change in picked:
            label = f"#{change.index}" + (f" ({change.id})" if change.id is not None else "")
            reason = change.new.reason if change.new is not None else None
            reason = None if diff.name == "total" and reason == "ok" else reason
            text = f"  {diff.name} {direction}: {label}: {_shown(change.old)} -> {_shown(change.new)}"
            text += f" ({reason})" if reason else ""
            out.append(Text(f"{text}; completion: {change.completion!r}", style="dim"))
    return out


def _shown(score: Score | None) -> str:
    if score is None:
        return "-"
    if score.status != "ok":
        return score.status
    return str(score.value) if isinstance(score.value, bool) else _number(score.numeric)


def _number(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.4f}"
