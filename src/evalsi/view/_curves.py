"""Learning curves: a training run's checkpoint evaluations, one results file per step, in one directory.

Layout read (what ``evalsi checkpoints`` writes under ``--log-dir``): ``<training-run>/<spec>/base.json`` for
the base model and ``step-<N>.json`` per step, each an ordinary results file with a ``checkpoint`` section
(``trainingRun``, ``step``: a number, or null for the base). The section's step wins over the file name.
Every step is compared with the base record by record (evalsi.runs' paired comparison): a step whose
difference has a 95% CI below zero and drops by more than the allowed amount is a regression.

This module is the only one that knows the layout, so another layout needs changes here alone.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalsi.runs import LoadedRun, compare_runs, load_results

BASE = "base"
_STEP_NAME = re.compile(r"^(?:base|step-(\d+))\.json$")


def step_of_name(name: str) -> int | str | None:
    """The step a file name stands for (``base`` for the base model), or None."""
    match = _STEP_NAME.match(name)
    if match is None:
        return None
    return BASE if match.group(1) is None else int(match.group(1))


def is_curve_dir(directory: Path) -> bool:
    """Whether a directory holds a learning curve: at least one step file (or a step's journal), by name."""
    return bool(step_paths(directory))


def step_paths(directory: Path) -> list[Path]:
    """The step files of a curve directory, the base first and then by step number.

    A step being evaluated may have only its journal so far (``step-300.json.journal``): its step file's path is
    given all the same, and reading it reads the journal.
    """
    try:
        names = {p.name.removesuffix(".journal") for p in directory.iterdir() if p.is_file()}
    except OSError:
        return []
    steps = [(step, name) for name in names if (step := step_of_name(name)) is not None]
    steps.sort(key=lambda item: -1 if item[0] == BASE else int(item[0]))
    return [directory / name for _, name in steps]


def curve_stamp(directory: Path) -> str:
    """What changes when a step file (or its journal) appears or changes: a watcher adding steps moves it."""
    parts = []
    for path in sorted(directory.iterdir()):
        name = path.name.removesuffix(".journal")
        if step_of_name(name) is not None:
            try:
                st = path.stat()
            except OSError:
                continue
            parts.append(f"{path.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


@dataclass
class StepPoint:
    """One step of the curve: its file, and per metric the mean, 95% CI and the difference from the base."""

    step: int | str
    path: Path
    status: str
    estimates: dict[str, dict[str, Any]]
    versus_base: dict[str, dict[str, Any]] = field(default_factory=dict)
    location: str | None = None
    """Where the step's checkpoint was (the ``checkpoint`` section's ``location``), when recorded."""


@dataclass
class Curve:
    """A training run's steps in order (the base first) and the metrics they report."""

    name: str
    metrics: list[str]
    points: list[StepPoint]
    training_run: str = ""
    spec: str = ""

    @property
    def base(self) -> StepPoint | None:
        """The base model's point, when it was evaluated."""
        return next((p for p in self.points if p.step == BASE), None)


RunReader = Callable[[Path], tuple[dict[str, Any], dict[str, Any], str]]
"""Reads a step file: its header, its summary (worked out for a step still running) and its status."""
RunLoader = Callable[[Path], LoadedRun]
"""Reads a step file's records for comparison with the base."""


def _step(path: Path, header: dict[str, Any]) -> int | str | None:
    section = header.get("checkpoint")
    if isinstance(section, dict) and "step" in section:
        return BASE if section["step"] is None else int(section["step"])
    return step_of_name(path.name)


def _location(header: dict[str, Any]) -> str | None:
    section = header.get("checkpoint")
    location = section.get("location") if isinstance(section, dict) else None
    return location if isinstance(location, str) and location else None


def _training_run(directory: Path, headers: list[dict[str, Any]]) -> str:
    for header in headers:
        section = header.get("checkpoint")
        if isinstance(section, dict) and section.get("trainingRun"):
            return str(section["trainingRun"])
    return directory.parent.name


def load_curve(
    directory: Path,
    read: RunReader,
    max_drop: float = 0.0,
    paths: list[Path] | None = None,
    load: RunLoader = load_results,
) -> Curve:
    """Every step of a training run, with each metric's estimate and its paired difference from the base.

    ``paths`` are the step files (default: those in ``directory``); ``read`` gives a step's header, summary and
    status, and ``load`` its records for the comparisons.

    Raises:
        DataError: A step file is not a readable results file.

    """
    points: list[StepPoint] = []
    metrics: list[str] = []
    headers: list[dict[str, Any]] = []
    for path in step_paths(directory) if paths is None else paths:
        header, summary, status = read(path)
        headers.append(header)
        step = _step(path, header)
        if step is None:
            continue
        estimates = summary.get("metrics") or {}
        metrics.extend(m for m in estimates if m not in metrics)
        points.append(StepPoint(step, path, status, estimates, location=_location(header)))
    points.sort(key=lambda p: (p.step != BASE, p.step if isinstance(p.step, int) else -1))
    training_run = _training_run(directory, headers)
    curve = Curve(f"{training_run} / {directory.name}", metrics, points, training_run, directory.name)
    base = curve.base
    if base is not None:
        base_run = load(base.path)
        for point in points:
            shared = [m for m in metrics if m in point.estimates and m in base.estimates]
            if point is base or not shared:
                continue
            for item in compare_runs(base_run, load(point.path), shared):
                d = item.comparison.difference
                drop = 0.0 if math.isnan(d.mean) else -d.mean
                point.versus_base[item.metric] = {
                    "difference": None if math.isnan(d.mean) else d.mean,
                    "ciLow": None if math.isnan(d.ci_low) else d.ci_low,
                    "ciHigh": None if math.isnan(d.ci_high) else d.ci_high,
                    "method": d.method,
                    "significant": item.comparison.significant,
                    "regressed": item.comparison.significant and drop > max_drop,
                }
    return curve
