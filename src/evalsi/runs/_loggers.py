"""Logging a run's results where users already look: TensorBoard, MLflow, Weights & Biases.

``evalsi run`` and ``evalsi checkpoints eval/watch`` hand each evaluated step to the loggers asked for (``--log-to``
or a RunSpec's ``loggers:`` section). Every logger gets, per run spec, the same things under the same names as the
trainer hooks log them: ``eval/<spec>/<metric>`` (the mean), ``eval/<spec>/<metric>/ci_low`` and ``/ci_high`` (its
95% interval) and ``eval/step``, at the checkpoint's step (0 for ``evalsi run`` and the base model); the per-record
table (one row per dataset record: its key, prompt, reference, first completion and each metric's mean over its
samples); and the path of the results file the numbers came from.

Each logger's library is an optional extra, imported when the logger is made, so a missing one is reported before
any evaluation starts. A logger opens its run for each step and closes it after, so nothing is left open between
checkpoints that may be hours apart; the same run (named after the training run, or the run) is found again.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evalsi.errors import DataError, EvalsiError, SpecError
from evalsi.records import Content
from evalsi.runs._bind import BoundRun
from evalsi.runs._driver import RunOutcome
from evalsi.runs._results import RecordResult, read_results
from evalsi.specs import LoggersSpec, MlflowLoggerSpec, TensorBoardLoggerSpec, WandbLoggerSpec
from evalsi.specs._model import SpecModel
from evalsi.specs._run import LOGGER_NAMES
from evalsi.stats import Estimate

DEFAULT_TENSORBOARD_DIR = Path("evalsi-logs") / "tensorboard"
"""Where TensorBoard event files go without ``loggers.tensorboard.dir`` (relative to the working directory)."""
TEXT_ROWS = 200
"""Records shown in TensorBoard's text view of the per-record table (the CSV beside it holds them all)."""

EXTRAS = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}
"""The extra that installs each logger's library."""


class LoggerError(EvalsiError, RuntimeError):
    """A logger could not record a step (its server refused or could not be reached, its files not written)."""


@dataclass(frozen=True)
class LoggedRun:
    """One run spec's results at one step, as the loggers show them."""

    spec: str
    """The run spec's name (``eval/<spec>/<metric>``)."""
    metrics: Mapping[str, Estimate]
    """Metric -> its mean with the 95% interval."""
    results: Path
    """The results file the numbers come from."""
    records: Sequence[RecordResult] = ()
    """Every record with its samples (the per-record table)."""


def metric_values(runs: Sequence[LoggedRun], step: int) -> dict[str, float]:
    """The scalars of a step: each metric's mean and interval bounds by name, and ``eval/step``.

    A value that cannot be estimated (``nan``: no scored sample, or one record for an interval) is left out.
    """
    values: dict[str, float] = {}
    for run in runs:
        for metric, est in run.metrics.items():
            key = f"eval/{run.spec}/{metric}"
            for name, value in ((key, est.mean), (f"{key}/ci_low", est.ci_low), (f"{key}/ci_high", est.ci_high)):
                if not math.isnan(value):
                    values[name] = float(value)
    values["eval/step"] = float(step)
    return values


def _text(content: Content | Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def record_table(run: LoggedRun) -> tuple[list[str], list[list[Any]]]:
    """The per-record table: columns, then one row per record.

    Columns: ``key``, ``id``, ``prompt``, ``reference``, ``completion`` (the first sample's), and each metric
    scored on the records with the mean of its values over the record's samples (empty when none has a value).
    """
    scored = list(dict.fromkeys(m for r in run.records for s in r.samples for m in s.scores))
    columns = ["key", "id", "prompt", "reference", "completion", *scored]
    rows: list[list[Any]] = []
    for record in run.records:
        means: list[Any] = []
        for metric in scored:
            values = [
                float(s.scores[metric].value)  # type: ignore[arg-type]
                for s in record.samples
                if metric in s.scores and s.scores[metric].value is not None
            ]
            means.append(sum(values) / len(values) if values else None)
        completion = record.samples[0].completion if record.samples else ""
        reference = "" if record.reference is None else _text(record.reference)
        rows.append([record.key, record.id or "", _text(record.prompt), reference, completion, *means])
    return columns, rows


def table_csv(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """The per-record table as CSV text (an empty cell for a missing value)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(columns)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return out.getvalue()


def _markdown(columns: Sequence[str], rows: Sequence[Sequence[Any]], limit: int) -> str:
    def cell(value: Any) -> str:
        text = "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)
        text = text.replace("|", "\\|").replace("\n", " ")
        return text if len(text) <= 120 else text[:119] + "…"

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"\n({len(rows) - limit} more records in the CSV)")
    return "\n".join(lines)


class Logger(Protocol):
    """Somewhere a step's results are logged."""

    name: str

    def log(self, group: str, step: int, runs: Sequence[LoggedRun]) -> None:
        """Log every run spec's results at ``step`` under ``group`` (the training run's name, or the run's).

        Args:
            group: The training run's name, or the run's.
            step: The training step (0 for a run outside training).
            runs: Each run spec's results at this step.

        Raises:
            LoggerError: The step could not be logged.

        """


def missing_library(name: str) -> SpecError:
    """The error of a logger whose library is not installed: it names the extra that installs it."""
    return SpecError(f"logging to {name} needs its library: pip install 'evalsi[{EXTRAS[name]}]'", file="--log-to")


@dataclass
class TensorBoardLogger:
    """TensorBoard event files in ``dir/<group>``, with each table as CSV beside them (tensorboardX writes them).

    Scalars at the step; as text, the results file's path and the per-record table (its first rows).
    """

    dir: Path
    name: str = "tensorboard"
    _writer_class: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self._writer_class is None:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:
                raise missing_library(self.name) from None
            self._writer_class = SummaryWriter

    def log(self, group: str, step: int, runs: Sequence[LoggedRun]) -> None:
        """Append this step's scalars and texts to the group's event files."""
        folder = self.dir / safe_name(group)
        try:
            # One event file per step: files are named by the second they were opened in, so two steps logged within
            # one second would share a name; the step in the name keeps them apart and in step order.
            writer = self._writer_class(logdir=str(folder), filename_suffix=f".step-{step:012d}")
            try:
                for key, value in metric_values(runs, step).items():
                    writer.add_scalar(key, value, global_step=step)
                for run in runs:
                    columns, rows = record_table(run)
                    table = folder / "records" / safe_name(run.spec) / f"step-{step}.csv"
                    table.parent.mkdir(parents=True, exist_ok=True)
                    table.write_text(table_csv(columns, rows), encoding="utf-8")
                    link = run.results.absolute().as_uri()
                    writer.add_text(f"eval/{run.spec}/results", f"[{run.results}]({link})", global_step=step)
                    text = f"{len(rows)} records; all of them in `{table}`\n\n{_markdown(columns, rows, TEXT_ROWS)}"
                    writer.add_text(f"eval/{run.spec}/records", text, global_step=step)
            finally:
                writer.close()
        except OSError as exc:
            raise LoggerError(f"tensorboard: could not write {folder}: {exc}") from exc


def safe_name(name: str) -> str:
    """A name as one path component (or artifact name): anything but letters, digits and ``-_.@`` becomes ``_``."""
    return "".join(c if c.isalnum() or c in "-_.@" else "_" for c in name) or "_"


def _setting_path(value: str | None, base_dir: Path | None) -> Path | None:
    if value is None:
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() or base_dir is None else base_dir / path


def make_logger(name: str, settings: SpecModel | None, base_dir: Path | None = None) -> Logger:
    """The logger ``name`` with its settings from a RunSpec (paths relative to ``base_dir``), else its defaults.

    Raises:
        SpecError: ``name`` is not a logger, or its library is not installed (naming the extra that installs it).

    """
    if name == "tensorboard":
        spec = settings if isinstance(settings, TensorBoardLoggerSpec) else TensorBoardLoggerSpec()
        folder = _setting_path(spec.dir, base_dir) or DEFAULT_TENSORBOARD_DIR
        return TensorBoardLogger(folder.absolute())
    if name == "mlflow":
        from evalsi.runs._log_mlflow import MlflowLogger  # the module names MLflow's classes; imported when used

        mlflow = settings if isinstance(settings, MlflowLoggerSpec) else MlflowLoggerSpec()
        experiment = mlflow.experiment or environment_default("MLFLOW_EXPERIMENT_NAME", "evalsi")
        return MlflowLogger(mlflow.tracking_uri, experiment)
    if name == "wandb":
        from evalsi.runs._log_wandb import WandbLogger  # the module names W&B's classes; imported when used

        spec_w = settings if isinstance(settings, WandbLoggerSpec) else WandbLoggerSpec()
        project = spec_w.project or environment_default("WANDB_PROJECT", "evalsi")
        wandb_dir = _setting_path(spec_w.dir, base_dir)
        return WandbLogger(project, spec_w.entity, spec_w.mode, None if wandb_dir is None else wandb_dir.absolute())
    raise SpecError(f"{name!r} is not a logger: give {', '.join(LOGGER_NAMES)}", file="--log-to")


def parse_log_to(values: Iterable[str]) -> list[str]:
    """``--log-to wandb,tensorboard`` (repeatable) as logger names, in order, once each.

    Raises:
        SpecError: A name is not a logger.

    """
    names: list[str] = []
    for value in values:
        for name in (n.strip().lower() for n in value.split(",")):
            if not name:
                continue
            if name not in LOGGER_NAMES:
                raise SpecError(f"{name!r} is not a logger: give {', '.join(LOGGER_NAMES)}", file="--log-to")
            if name not in names:
                names.append(name)
    return names


def make_loggers(log_to: Iterable[str], specs: Sequence[tuple[LoggersSpec, Path | None, str]] = ()) -> list[Logger]:
    """The loggers ``--log-to`` names and those the specs' ``loggers:`` sections turn on.

    Args:
        log_to: ``--log-to`` values (``wandb,tensorboard``; repeatable).
        specs: Each run spec's ``loggers`` section, the folder its paths are relative to, and its file (for
            errors). A logger's settings come from the spec that sets them; two specs that set one logger
            differently are refused, since one logger run receives both.

    Raises:
        SpecError: An unknown logger, a library that is not installed, or two specs disagreeing on a logger.

    """
    chosen: dict[str, tuple[SpecModel | None, Path | None, str]] = {}
    for name in parse_log_to(log_to):
        chosen[name] = (None, None, "--log-to")
    for section, base_dir, source in specs:
        for name, settings in section.named().items():
            earlier = chosen.get(name)
            if earlier is not None and earlier[0] is not None:
                if _resolved(earlier[0], earlier[1]) != _resolved(settings, base_dir):
                    raise SpecError(
                        f"loggers.{name} differs from its settings in {earlier[2]}; one {name} run receives every "
                        "spec's results, so give it the same settings (or set them in one spec only)",
                        file=source,
                    )
                continue
            chosen[name] = (settings, base_dir, source)
    loggers: list[Logger] = []
    for name, (chosen_settings, chosen_dir, source) in chosen.items():
        try:
            loggers.append(make_logger(name, chosen_settings, chosen_dir))
        except SpecError as exc:
            raise SpecError(exc.detail, file=source, path="spec.loggers" if source != "--log-to" else "") from None
    return loggers


def _resolved(settings: SpecModel, base_dir: Path | None) -> dict[str, Any]:
    data = settings.model_dump()
    for key in ("dir",):
        if isinstance(data.get(key), str):
            data[key] = str(_setting_path(data[key], base_dir))
    return data


def log_step(loggers: Sequence[Logger], group: str, step: int, runs: Sequence[LoggedRun]) -> None:
    """Log a step to every logger; each one is tried even when another fails.

    Args:
        loggers: The loggers (:func:`run_loggers`).
        group: The training run's name, or the run's.
        step: The training step.
        runs: Each run spec's results at this step.

    Raises:
        LoggerError: Naming every logger that failed and why.

    """
    failures: list[str] = []
    for logger in loggers:
        try:
            logger.log(group, step, runs)
        except LoggerError as exc:
            failures.append(str(exc))
        except Exception as exc:  # a client library's own error: said with the logger's name
            failures.append(f"{logger.name}: {type(exc).__name__}: {exc}")
    if failures:
        raise LoggerError("the results are saved, but logging them failed: " + "; ".join(failures))


def environment_default(name: str, fallback: str) -> str:
    """An environment variable's value, else ``fallback``."""
    return os.environ.get(name) or fallback


def results_records(path: Path) -> list[RecordResult]:
    """The records of a results file (none when it is missing or unreadable: the table is then empty).

    Args:
        path: The results file.

    """
    try:
        data = read_results(path)
    except DataError:
        return []
    return [RecordResult.from_json(r) for r in data.get("records") or [] if isinstance(r, dict)]


def run_loggers(run: BoundRun, log_to: Iterable[str]) -> list[Logger]:
    """The loggers of ``evalsi run``: ``--log-to`` and the spec's ``loggers:`` section.

    Args:
        run: The bound run.
        log_to: Logger names given with ``--log-to``.

    Raises:
        SpecError: An unknown logger, or a library that is not installed.

    """
    return make_loggers(log_to, [(run.body.loggers, run.base_dir, run.spec.source or run.spec.name)])


def log_outcome(loggers: Sequence[Logger], run: BoundRun, outcome: RunOutcome) -> None:
    """Log a finished run (at step 0, under the run's name).

    Args:
        loggers: The loggers (:func:`run_loggers`).
        run: The bound run.
        outcome: What the run produced.

    Raises:
        LoggerError: A logger failed.

    """
    if loggers:
        logged = LoggedRun(run.spec.name, outcome.summary.metrics, outcome.path.absolute(), outcome.records)
        log_step(loggers, run.spec.name, 0, [logged])
