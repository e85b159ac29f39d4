"""Learning curves: where a checkpoint's results file lives, each step against the base, and the regression rule.

The one place that knows the step-file layout and how a curve is read; the CLI (``evalsi checkpoints``), the
trainer callbacks, the watcher, the viewer and the server's ``CompareRuns`` all go through it, so a curve is the
same whoever evaluated the steps and whoever shows them.

Layout (what checkpoint evaluation writes under its log directory)::

    <log-dir>/<training-run>/<spec>/base.json        the model before training
    <log-dir>/<training-run>/<spec>/step-<N>.json    each evaluated step

Each file is an ordinary results file (:class:`evalsi.runs.RunResult`) with a ``checkpoint`` section
(``trainingRun``, ``step``: a number, or null for the base); the section's step wins over the file name. A step
being evaluated may have only its journal (``step-300.json.journal``) so far.

Every step is compared with the base record by record (:func:`evalsi.runs.compare_runs`); a step regressed on a
metric under a rule ``METRIC[:MAX_DROP]`` when :func:`evalsi.stats.is_regression` says so: the paired 95% interval
of (step − base) lies wholly below zero and the drop exceeds ``MAX_DROP``.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evalsi.runs._compare import LoadedRun, compare_runs
from evalsi.stats import EMPTY, Estimate, PairedComparison, RegressionRule, regressed

BASE: Literal["base"] = "base"
"""The base model's label (its file is ``base.json``)."""
Step = int | None
"""A training step, or None for the base model."""
_STEP_NAME = re.compile(r"^(?:base|step-(\d+))\.json$")


# --- the step-file layout -------------------------------------------------------------------------------------


def safe_name(name: str) -> str:
    """A training-run or spec name as a single path component (no separators, no dots alone).

    Example:
        >>> safe_name("my run/v2"), safe_name("..")
        ('my-run-v2', 'run')

    """
    cleaned = re.sub(r"[^A-Za-z0-9._@-]+", "-", name).strip("-.")
    return cleaned or "run"


def run_dir(log_dir: Path, training_run: str, spec_name: str) -> Path:
    """The folder holding one spec's step files for one training run."""
    return Path(log_dir) / safe_name(training_run) / safe_name(spec_name)


def step_file(log_dir: Path, training_run: str, spec_name: str, step: Step) -> Path:
    """``base.json`` or ``step-<N>.json`` of a spec in a training run.

    Example:
        >>> step_file(Path("logs"), "run-1", "math", 200).as_posix()
        'logs/run-1/math/step-200.json'

    """
    name = "base.json" if step is None else f"step-{step}.json"
    return run_dir(log_dir, training_run, spec_name) / name


def step_of_name(name: str) -> int | Literal["base"] | None:
    """The step a file name stands for (:data:`BASE` for the base model), or None when it is no step file.

    Example:
        >>> step_of_name("step-300.json"), step_of_name("base.json"), step_of_name("notes.json")
        (300, 'base', None)

    """
    match = _STEP_NAME.match(name)
    if match is None:
        return None
    return BASE if match.group(1) is None else int(match.group(1))


def step_paths(directory: Path) -> list[Path]:
    """The step files of a curve directory, the base first and then by step number.

    A step being evaluated may have only its journal so far: its step file's path is given all the same (reading
    it reads the journal).
    """
    try:
        names = {p.name.removesuffix(".journal") for p in directory.iterdir() if p.is_file()}
    except OSError:
        return []
    steps = [(step, name) for name in names if (step := step_of_name(name)) is not None]
    steps.sort(key=lambda item: -1 if item[0] == BASE else int(item[0]))
    return [directory / name for _, name in steps]


def step_files(log_dir: Path, training_run: str, spec_name: str) -> dict[Step, Path]:
    """Every step file written so far (journals alone not counted), keyed by step (None: the base), in order.

    Args:
        log_dir: The evaluation log directory.
        training_run: The training run's name.
        spec_name: The run spec's name.

    """
    found: dict[Step, Path] = {}
    for path in step_paths(run_dir(log_dir, training_run, spec_name)):
        step = step_of_name(path.name)
        if path.exists():
            found[None if step == BASE or step is None else step] = path
    return found


def is_curve_dir(directory: Path) -> bool:
    """Whether a directory holds a learning curve: at least one step file (or a step's journal), by name."""
    return bool(step_paths(directory))


def curve_stamp(directory: Path) -> str:
    """What changes when a step file (or its journal) appears or changes: a watcher adding steps moves it."""
    parts = []
    for path in sorted(directory.iterdir()):
        if step_of_name(path.name.removesuffix(".journal")) is not None:
            try:
                st = path.stat()
            except OSError:
                continue
            parts.append(f"{path.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def step_of_header(path: Path, header: Mapping[str, Any]) -> Step | Literal[False]:
    """A step file's step: its ``checkpoint`` section's, else its name's (False when neither says)."""
    section = header.get("checkpoint")
    if isinstance(section, Mapping) and "step" in section:
        return None if section["step"] is None else int(section["step"])
    step = step_of_name(path.name)
    return False if step is None else None if step == BASE else step


# --- the regression rule --------------------------------------------------------------------------------------


def failed_rules(comparisons: Mapping[str, PairedComparison], rules: Iterable[RegressionRule]) -> list[RegressionRule]:
    """The rules a step broke: those whose metric was compared and regressed (:func:`evalsi.stats.regressed`)."""
    return [r for r in rules if r.metric in comparisons and regressed(comparisons[r.metric], r)]


def compare_with_base(
    base: LoadedRun, step: LoadedRun, rules: Sequence[RegressionRule], metrics: Sequence[str] = ()
) -> tuple[dict[str, PairedComparison], list[RegressionRule]]:
    """Paired comparisons of a step with the base for ``metrics`` and the rules' metrics, and the rules that failed.

    A metric one of the two runs lacks is left out (a rule on it does not fail).
    """
    wanted = list(dict.fromkeys([*metrics, *(r.metric for r in rules)]))
    if not wanted:
        return {}, []
    names = [{m.name for m in run.metrics} | set(run.pass_k) for run in (base, step)]
    shared = [m for m in wanted if m in names[0] and m in names[1]]
    if not shared:
        return {}, []
    by_metric = {c.metric: c.comparison for c in compare_runs(base, step, shared)}
    return by_metric, failed_rules(by_metric, rules)


# --- the curve ------------------------------------------------------------------------------------------------


def summary_estimates(summary: Mapping[str, Any]) -> dict[str, Estimate]:
    """Each metric's mean with its interval, from a results summary."""
    return {
        name: Estimate.from_dict(value) if isinstance(value, dict) else EMPTY
        for name, value in (summary.get("metrics") or {}).items()
    }


@dataclass
class CurvePoint:
    """One step (or the base) on the curve."""

    step: Step
    path: Path | str
    """The step's results file, or its run's URL on an evalsi server."""
    complete: bool
    gates_passed: bool
    means: dict[str, Estimate]
    changes: dict[str, PairedComparison] = field(default_factory=dict)
    """Metric -> comparison with the base (absent for the base itself, or without base results)."""
    regressions: list[RegressionRule] = field(default_factory=list)
    run_status: str = ""
    """The run's own status: ``complete``, ``partial``, or ``running`` while it is evaluated."""
    estimates: dict[str, Any] = field(default_factory=dict)
    """Metric -> the summary's estimate as the results file holds it (mean, interval and method)."""
    location: str | None = None
    """Where the step's checkpoint was (the ``checkpoint`` section's ``location``), when recorded."""

    @property
    def label(self) -> str:
        """``base`` or the step number."""
        return BASE if self.step is None else str(self.step)

    @property
    def regressed(self) -> bool:
        """Whether a regression rule failed at this step."""
        return bool(self.regressions)

    @property
    def status(self) -> str:
        """``regressed``, ``gate failed``, ``partial`` or ``ok``."""
        if self.regressions:
            return "regressed"
        if not self.complete:
            return "partial"
        return "ok" if self.gates_passed else "gate failed"

    def regressed_on(self, metric: str) -> bool:
        """Whether the metric regressed at this step.

        Args:
            metric: The metric's name.

        """
        return any(r.metric == metric for r in self.regressions)


@dataclass
class Curve:
    """A spec's learning curve over a training run: the base first, then the steps in order."""

    training_run: str
    spec: str
    metrics: list[str]
    points: list[CurvePoint]

    @property
    def base(self) -> CurvePoint | None:
        """The base model's point, when it was evaluated."""
        return next((p for p in self.points if p.step is None), None)

    @property
    def latest(self) -> CurvePoint | None:
        """The highest step evaluated."""
        steps = [p for p in self.points if p.step is not None]
        return steps[-1] if steps else None

    @property
    def failed(self) -> bool:
        """Whether the latest checkpoint regressed or failed its spec's gates (exit code 3)."""
        latest = self.latest
        return latest is not None and latest.status in ("regressed", "gate failed")

    def to_dict(self) -> dict[str, Any]:
        """JSON form: per step and metric, the mean with its interval and the change from the base."""
        points = []
        for point in self.points:
            metrics: dict[str, Any] = {}
            for name in self.metrics:
                est = point.means.get(name, EMPTY)
                change = point.changes.get(name)
                metrics[name] = {
                    "mean": _clean(est.mean),
                    "ciLow": _clean(est.ci_low),
                    "ciHigh": _clean(est.ci_high),
                    "ci": est.to_dict()["ci"],
                    "change": None if change is None else change.difference.to_dict(),
                    "significant": bool(change is not None and change.significant),
                    "regressed": point.regressed_on(name),
                }
            points.append(
                {
                    "step": point.step,
                    "label": point.label,
                    "status": point.status,
                    "path": str(point.path),
                    "metrics": metrics,
                    "regressions": [str(r) for r in point.regressions],
                }
            )
        latest = self.latest
        return {
            "trainingRun": self.training_run,
            "spec": self.spec,
            "metrics": self.metrics,
            "points": points,
            "latest": None if latest is None else latest.label,
            "failed": self.failed,
        }


def _clean(value: float) -> float | None:
    return None if math.isnan(value) else value


StepReader = Callable[[Path], tuple[Mapping[str, Any], Mapping[str, Any], str]]
"""Reads a step file: its header, its summary (worked out for a step still running) and its run status."""
StepLoader = Callable[[Path], LoadedRun]
"""Reads a step file's records for the comparison with the base."""


def read_curve(
    paths: Iterable[Path],
    read: StepReader,
    load: StepLoader,
    *,
    training_run: str,
    spec: str,
    metrics: Sequence[str] | None = None,
    rules: Sequence[RegressionRule] = (),
    max_drop: float | None = None,
) -> Curve:
    """A learning curve from step files: each step's estimates and its paired comparison with the base.

    Args:
        paths: The step files (:func:`step_paths`); a file whose step neither its section nor its name gives is
            left out.
        read: Gives a step's header, summary and run status.
        load: Gives a step's records for the comparisons.
        training_run: The training run's name (a step's ``checkpoint`` section names it when this is empty).
        spec: The run spec's name.
        metrics: The metrics to show and compare (default: every metric a step's summary reports).
        rules: Regression rules, checked on each step against the base.
        max_drop: A rule with this ``MAX_DROP`` on every metric (the viewer's), beside ``rules``.

    Returns:
        The curve, the base first.

    Raises:
        DataError: A step file is not a readable results file.

    """
    points: list[CurvePoint] = []
    found: list[str] = []
    for path in paths:
        header, summary, status = read(path)
        step = step_of_header(path, header)
        if step is False:
            continue
        estimates = dict(summary.get("metrics") or {})
        found.extend(m for m in estimates if m not in found)
        gates = summary.get("gates") or []
        section = header.get("checkpoint")
        location = section.get("location") if isinstance(section, Mapping) else None
        if not training_run and isinstance(section, Mapping) and section.get("trainingRun"):
            training_run = str(section["trainingRun"])
        points.append(
            CurvePoint(
                step,
                path,
                status == "complete",
                all(isinstance(g, Mapping) and g.get("passed") for g in gates),
                summary_estimates(summary),
                run_status=status,
                estimates=estimates,
                location=location if isinstance(location, str) and location else None,
            )
        )
    points.sort(key=lambda p: -1 if p.step is None else p.step)
    shown = list(metrics) if metrics is not None else found
    every = [RegressionRule(m, max_drop) for m in shown] if max_drop is not None else []
    curve = Curve(training_run, spec, shown, points)
    base = curve.base
    if base is None:
        return curve
    base_run = load(Path(base.path))
    for point in points:
        shared = [m for m in shown if m in point.means and m in base.means]
        if point is base or not shared:
            continue
        point.changes = {c.metric: c.comparison for c in compare_runs(base_run, load(Path(point.path)), shared)}
        point.regressions = failed_rules(point.changes, [*rules, *every])
    return curve
