"""``evalsi rewards score``: score a file of rollouts with a RewardSpec."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from evalsi.cli._console import EXIT_FAILED, EXIT_OK, fail, stderr
from evalsi.cli._summary import reward_summary
from evalsi.cli.rewards_probe import exit_code as probe_exit_code
from evalsi.cli.rewards_probe import probe_command, report_view, run_probes
from evalsi.cli.rewards_rescore import rescore_command
from evalsi.cli.rewards_serve import serve_command
from evalsi.errors import DataError, RewardBatchError, SpecError
from evalsi.records import Record
from evalsi.rewards import Reward, RewardResult, load, read_rollout_file, score_keys, write_jsonl
from evalsi.rewards.probes import ProbeLimits
from evalsi.rewards.wire import result_json

app = typer.Typer(help="Score rollouts with a RewardSpec, or serve one to a trainer.", no_args_is_help=True)

CHUNK = 512
"""Rollouts scored per engine call; the progress bar advances per chunk."""


@app.command("score")
def score_command(
    spec: Path = typer.Option(..., "--spec", "-s", help="The RewardSpec YAML file."),
    data: Path = typer.Option(
        ..., "--data", "-d", help="Rollouts: JSONL, a JSON array, or Parquet; '-' reads JSONL or JSON from stdin."
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Where to write one JSON object per rollout (default: stdout)."
    ),
    keep_rollouts: bool = typer.Option(
        False,
        "--keep-rollouts",
        help="Write each rollout and its components' content keys beside its scores, for `rewards rescore`.",
    ),
    probe: bool = typer.Option(
        False, "--probe", help="Probe the spec with this data first (see `rewards probe`); exit 3 before scoring."
    ),
    name: str | None = typer.Option(None, "--name", help="Which RewardSpec, when the file holds several."),
    details: bool = typer.Option(False, "--details", help="Include each component's details in the output."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or summary on stderr."),
    ray: str | None = typer.Option(
        None,
        "--ray",
        metavar="ADDRESS",
        help="Score on a Ray cluster with Ray Data ('auto': the running cluster or RAY_ADDRESS; 'local': a new "
        "one in this process; or host:port); needs --output, and a rerun resumes from the finished shards.",
    ),
    ray_workers: int = typer.Option(2, "--ray-workers", min=1, help="Scorer actors with --ray."),
) -> None:
    """Score every rollout in DATA with the RewardSpec in SPEC.

    Writes one JSON object per rollout, in input order: index, id (when given), total (null when there is
    none), status (ok, gated, no_total) and components ({name: {value, status, reason}}). The output appears
    only when every rollout is scored: a batch completes or fails whole.

    With --probe, the probes of `evalsi rewards probe` run first on the same data; when a probe earns reward or
    the data's right answers do not earn full reward, the table is printed and nothing is scored (exit 3).

    Exit codes: 0 scored; 1 a component errored under onError: raise; 2 bad usage, spec or data; 3 --probe found
    the spec hackable.
    """
    if ray is not None:
        _score_on_ray(spec, data, output, name, details, quiet, ray, ray_workers)
        return
    try:
        reward = load(spec, name)
        rollouts, source = read_rollout_file(data)
    except (SpecError, DataError) as exc:
        fail(str(exc))
    try:
        records = reward.records(rollouts)
    except DataError as exc:
        fail(str(source.locate(exc)))
    if probe:
        _probe_first(reward, records, quiet)
    try:
        results = _score_in_chunks(reward, records, show_progress=not quiet and len(records) > CHUNK)
    except RewardBatchError as exc:
        where = source.error(exc.index, f"component {exc.component!r} errored: {exc.cause}")
        fail(
            f"the batch failed, nothing was written: {where} (onError: raise fails the batch; "
            "set onError to 'zero' or 'none' to score past errors)",
            EXIT_FAILED,
        )
    lines = _result_lines(reward, records, results, details, rollouts if keep_rollouts else None)
    if output is None:
        sys.stdout.buffer.write(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        sys.stdout.flush()
    else:
        write_jsonl(output, lines)
    if not quiet:
        stderr.print(reward_summary(reward, results))
        if output is not None:
            stderr.print(f"wrote {len(lines)} results to {output}", highlight=False)


def _result_lines(
    reward: Reward,
    records: list[Record],
    results: list[RewardResult],
    details: bool,
    rollouts: list[dict[str, Any]] | None,
) -> list[dict[str, Any]]:
    """One JSON object per rollout, with its rollout and content keys under ``--keep-rollouts``.

    The content key of each component's score lets ``rewards rescore`` reuse the scores whose key is unchanged.
    """
    pairs = enumerate(zip(records, results, strict=True))
    lines: list[dict[str, Any]] = [
        result_json(result, i, record_id=record.id, details=details) for i, (record, result) in pairs
    ]
    if rollouts is not None:
        for line, rollout, keys in zip(lines, rollouts, score_keys(reward, records), strict=True):
            line["rollout"] = rollout
            line["keys"] = keys
    return lines


def _probe_first(reward: Reward, records: list[Record], quiet: bool) -> None:
    """``--probe``: the probes on the data to be scored; exit 3 (nothing scored) when they find a problem."""
    report = run_probes(reward, records, ProbeLimits())
    code = probe_exit_code(report)
    if not quiet or code != EXIT_OK:
        stderr.print(report_view(report))
    if code != EXIT_OK:
        fail("--probe: the probes found problems in this spec (above); nothing was scored", code)


def _score_in_chunks(reward: Reward, records: list[Record], show_progress: bool) -> list[RewardResult]:
    results: list[RewardResult] = []
    progress = Progress(
        TextColumn("scoring"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=stderr,
        disable=not show_progress,
        transient=True,
    )
    with progress:
        task = progress.add_task("scoring", total=len(records))
        for start in range(0, len(records), CHUNK):
            chunk = records[start : start + CHUNK]
            try:
                results.extend(reward.score_records(chunk))
            except RewardBatchError as exc:
                raise RewardBatchError(exc.index + start, exc.component, exc.cause) from None
            progress.advance(task, len(chunk))
    return results


def _score_on_ray(
    spec: Path,
    data: Path,
    output: Path | None,
    name: str | None,
    details: bool,
    quiet: bool,
    address: str,
    workers: int,
) -> None:
    """``--ray``: the same JSON lines, scored on Ray Data (``evalsi.ray.score_dataset``)."""
    if output is None:
        fail("--ray needs --output: finished shards are kept beside it, so a rerun resumes")
    try:
        from evalsi.ray import score_dataset
        from evalsi.ray._data import DatasetBatchError

        reward = load(spec, name)
        report = score_dataset(reward, data, output, address=address, num_workers=workers, details=details)
    except DatasetBatchError as exc:
        fail(
            f"the batch failed, nothing was written to {output}: {exc.where}: component {exc.component!r} errored: "
            f"{exc.cause} (finished shards are kept: a rerun resumes)",
            EXIT_FAILED,
        )
    except (SpecError, DataError, ImportError) as exc:
        fail(str(exc))
    if not quiet:
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(report.statuses.items()))
        resumed = f", {report.resumed} of {report.shards} shards from an earlier run" if report.resumed else ""
        stderr.print(f"scored {report.rollouts} rollouts on Ray ({statuses}{resumed})", highlight=False)
        stderr.print(f"wrote {report.rollouts} results to {output}", highlight=False)


app.command("serve")(serve_command)
app.command("probe")(probe_command)
app.command("rescore")(rescore_command)
