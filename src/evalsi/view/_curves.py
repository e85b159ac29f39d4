"""Learning curves: a training run's checkpoint evaluations, one results file per step, in one directory.

Layout read (``--log-dir/<training-run>/``): one JSON results file per step, named ``step-<N>.json`` (or
``checkpoint-<N>``, ``global_step_<N>``, with an optional ``.results`` before ``.json``), and ``base.json``
for the base model. A file's ``training.step`` field, when present, wins over its name. Every step is compared
with the base record by record (evalsi.runs' paired comparison): a step whose difference is significantly
below zero, by more than the allowed drop, is a regression.

This module is the only one that knows the layout, so another layout needs changes here alone.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from evalsi.errors import DataError
from evalsi.runs import compare_runs, load_results

BASE = "base"
_STEP_NAME = re.compile(r"^(?:(?:step|checkpoint)-|global_step_)(\d+)(?:\.results)?\.json$|^base(?:\.results)?\.json$")


def step_of_name(name: str) -> int | str | None:
    """The step a file name stands for (``base`` for the base model), or None."""
    match = _STEP_NAME.match(name)
    if match is None:
        return None
    return BASE if match.group(1) is None else int(match.group(1))


def is_curve_dir(directory: Path) -> bool:
    """Whether a directory holds a learning curve: at least one step file (by name)."""
    try:
        return any(step_of_name(p.name) is not None for p in directory.iterdir() if p.is_file())
    except OSError:
        return False


@dataclass
class StepPoint:
    """One step of the curve: its file, and per metric the mean, 95% CI and the difference from the base."""

    step: int | str
    path: Path
    estimates: dict[str, dict[str, Any]]
    versus_base: dict[str, dict[str, Any]] = field(default_factory=dict)

    def regressed(self, metric: str) -> bool:
        """Whether this step regressed on ``metric`` against the base."""
        return bool(self.versus_base.get(metric, {}).get("regressed"))


@dataclass
class Curve:
    """A training run's steps in order (the base first) and the metrics they report."""

    name: str
    metrics: list[str]
    points: list[StepPoint]

    @property
    def base(self) -> StepPoint | None:
        """The base model's point, when it was evaluated."""
        return next((p for p in self.points if p.step == BASE), None)


def _step_of_file(path: Path, data: dict[str, Any]) -> int | str | None:
    training = data.get("training")
    if isinstance(training, dict) and training.get("step") is not None:
        step = training["step"]
        return BASE if step == BASE else int(step)
    return step_of_name(path.name)


def load_curve(directory: Path, max_drop: float = 0.0) -> Curve:
    """Every step file of a training run, with each metric's estimate and its paired difference from the base.

    Raises:
        DataError: A step file is not a readable results file.

    """
    points: list[StepPoint] = []
    metrics: list[str] = []
    for path in sorted(directory.iterdir()):
        if not path.is_file() or step_of_name(path.name) is None:
            continue
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise DataError(f"not a readable step file: {exc}", file=str(path)) from None
        if not isinstance(data, dict) or data.get("kind") != "RunResults":
            raise DataError("not an evalsi results file (no kind: RunResults)", file=str(path))
        step = _step_of_file(path, data)
        if step is None:
            continue
        estimates = ((data.get("summary") or {}).get("metrics")) or {}
        metrics.extend(m for m in estimates if m not in metrics)
        points.append(StepPoint(step, path, estimates))
    points.sort(key=lambda p: (p.step != BASE, p.step if isinstance(p.step, int) else -1))
    curve = Curve(directory.name, metrics, points)
    base = curve.base
    if base is not None:
        base_run = load_results(base.path)
        for point in points:
            if point is base:
                continue
            run = load_results(point.path)
            shared = [m for m in metrics if m in point.estimates and m in base.estimates]
            if not shared:
                continue
            for item in compare_runs(base_run, run, shared):
                d = item.comparison.difference
                drop = -d.mean if not math.isnan(d.mean) else 0.0
                point.versus_base[item.metric] = {
                    "difference": None if math.isnan(d.mean) else d.mean,
                    "ciLow": None if math.isnan(d.ci_low) else d.ci_low,
                    "ciHigh": None if math.isnan(d.ci_high) else d.ci_high,
                    "significant": item.comparison.significant,
                    "regressed": item.comparison.significant and d.mean < 0 and drop > max_drop,
                }
    return curve
