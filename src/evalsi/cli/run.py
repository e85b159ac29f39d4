"""``evalsi run -f spec.yaml [--set path.to.field=value ...]``: run a RunSpec and summarise it.

Exit codes: 0 every record done and every gate passed; 1 records failed to generate (rerun to resume) or the
run stopped under ``onError: raise``; 2 bad usage, spec or data; 3 a gate failed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from evalsi.cli._console import EXIT_FAILED, EXIT_GATE, EXIT_OK, fail, stderr
from evalsi.cli._ray import PoolScorers, RayAddress, RayShardCount, RayWorkers, ray_shards
from evalsi.cli._tables import interval_note, number_table
from evalsi.errors import DataError, SpecError
from evalsi.runs import GenerationError, LoggerError, Runner, RunOutcome, RunVerdict, load_run
from evalsi.runs._loggers import log_outcome, run_loggers
from evalsi.stats import Estimate

EXIT_CODES: dict[RunVerdict, int] = {"ok": EXIT_OK, "failed": EXIT_FAILED, "gate failed": EXIT_GATE}
"""The process exit code of each way a run ends."""


def run_command(
    file: Annotated[Path, typer.Option("--file", "-f", help="The RunSpec YAML file.")],
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override a spec field, e.g. --set sampling.temperature=0.6 (repeatable); a path set this way is "
            "relative to the current directory.",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Which RunSpec, when the file holds several.")] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="The results file, relative to the current directory (default: the spec's output, relative to "
            "the spec file; without one, <name>.results.json in the current directory, never beside the spec).",
        ),
    ] = None,
    restart: Annotated[
        bool, typer.Option("--restart", help="Discard earlier results of this run instead of resuming.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    log_to: Annotated[
        list[str] | None,
        typer.Option(
            "--log-to",
            help="Also log the results to tensorboard, mlflow and/or wandb (comma-separated or repeated; settings "
            "in the spec's loggers: section).",
        ),
    ] = None,
    ray: RayAddress = None,
    ray_workers: RayWorkers = 2,
    shard_count: RayShardCount = None,
) -> None:
    """Generate completions from the spec's target, score them, write the results file and summarise.

    Every spec field can be overridden: --set numSamples=50 --set samples=8 --set target.model=my-lora.

    numSamples: how many dataset records are evaluated (the first N; -1, the default, all of them).

    samples: how many completions are generated for each record (OpenAI's n; pass@k needs samples >= k).

    An interrupted run resumes from its finished records when run again with the same spec.

    --ray ADDRESS scores on a Ray cluster; with --ray-shards N the cluster's CPU workers also request the
    generations, in N shards.

    Exit codes: 0 ok; 1 records failed (rerun to resume); 2 bad usage, spec or data; 3 a gate failed.
    """
    # Paths given here (-f, -o, a path set with --set) are relative to the working directory; the spec's own
    # paths (spec.output, dataset.path...) to the spec file.
    extra = [*(overrides or []), *([f"output={json.dumps(str(output.absolute()))}"] if output is not None else [])]
    if shard_count is not None and ray is None:
        fail("--ray-shards needs --ray ADDRESS (the cluster the shards run on)")
    pools: PoolScorers | None = None
    try:
        run = load_run(file, name, extra)
        loggers = run_loggers(run, log_to or [])
        shards = ray_shards(ray, shard_count) if ray is not None and shard_count is not None else None
        pools = PoolScorers(ray, ray_workers) if ray is not None and shards is None else None
        scorer = pools(run) if pools is not None else None
        outcome = Runner(run, progress=not quiet, restart=restart, scorer=scorer, shards=shards).run()
    except (SpecError, DataError, GenerationError, ImportError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted: every scored record is saved; run the same command again to resume", EXIT_FAILED)
    finally:
        if pools is not None:
            pools.close()
    stderr.print(run_summary(outcome))
    try:
        log_outcome(loggers, run, outcome)
    except LoggerError as exc:
        fail(str(exc), EXIT_FAILED)
    if not outcome.summary.gates_passed:  # the exit code is said once: here only when the gate decides it
        code = f" (exit {EXIT_GATE})" if outcome.verdict == "gate failed" else ""
        stderr.print(f"[bold red]a gate failed[/]{code}", highlight=False)
    if outcome.aborted:
        fail(f"the run stopped (onError: raise): {outcome.aborted} (exit {EXIT_FAILED})", EXIT_FAILED)
    if outcome.failed:
        first = next(iter(outcome.failed.items()))
        fail(
            f"{len(outcome.failed)} records could not be generated (first: {first[0]}: {first[1]}); "
            f"run again to resume them (exit {EXIT_FAILED})",
            EXIT_FAILED,
        )
    raise typer.Exit(EXIT_CODES[outcome.verdict])


def fmt(value: float, digits: int = 4) -> str:
    """A number for a table; ``nan`` as ``-``."""
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def interval(est: Estimate) -> str:
    """``[low, high]``, or ``-`` when it cannot be estimated."""
    return "-" if math.isnan(est.ci_low) else f"[{est.ci_low:.4f}, {est.ci_high:.4f}]"


def run_summary(outcome: RunOutcome) -> Group:
    """The metrics table (mean, 95% CI, standard error, records, score statuses) and the gates table.

    Numbers are never cut short at any console width; metric names fold instead.
    """
    summary = outcome.summary
    rows = []
    for metric, est in summary.metrics.items():
        counts = summary.counts.get(metric)
        statuses = [str(counts[s]) for s in ("ok", "skipped", "error")] if counts else ["", "", ""]
        rows.append([escape(metric), fmt(est.mean), interval(est), fmt(est.se), str(est.clusters), *statuses])
    columns = ("metric", "mean", "95% CI", "se", "records", "ok", "skipped", "errored")
    note = interval_note((metric, est.method) for metric, est in summary.metrics.items())
    table = number_table(
        f"{escape(str(outcome.path))}: {len(outcome.records)} records", columns, columns[1:], rows, caption=note
    )
    parts: list[Table | Text] = [table]
    for metric, reason in summary.unscored.items():
        parts.append(Text(f"{metric}: nothing was scored; {reason}", style="yellow"))
    if summary.gates:
        gate_rows = []
        for gate in summary.gates:
            status = "[green]passed[/]" if gate.passed else f"[bold red]FAILED[/] {escape(gate.reason)}"
            value = "-" if gate.value is None else f"{gate.value:.4f}"
            bounds = ["-" if b is None else f"{b:g}" for b in (gate.min, gate.max)]
            gate_rows.append([escape(gate.metric), value, *bounds, status])
        parts.append(
            number_table("gates", ("metric", "value", "min", "max", "status"), ("value", "min", "max"), gate_rows)
        )
    notes = f"resumed {outcome.resumed} records, generated {outcome.generated}"
    wall = outcome.timings.get("wallSeconds")
    parts.append(Text(f"{notes}; {wall} s" if wall is not None else notes, style="dim"))
    return Group(*parts)
