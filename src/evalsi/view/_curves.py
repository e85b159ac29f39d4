"""Learning curves in the viewer: a training run's step files, each step against the base, as the page shows them.

The layout (``<training-run>/<spec>/base.json`` and ``step-<N>.json``), the comparison with the base and the
regression rule are :mod:`evalsi.runs._curve`'s, the same the CLI and the trainer callbacks use; the viewer adds
its own ``MAX_DROP`` (the page's ``drop``), applied to every metric, and reads steps through its run cache.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from evalsi.runs import load_results
from evalsi.runs._curve import (
    BASE,
    Curve,
    CurvePoint,
    StepLoader,
    StepReader,
    curve_stamp,
    is_curve_dir,
    read_curve,
    step_of_name,
    step_paths,
)

__all__ = [
    "BASE",
    "curve_stamp",
    "is_curve_dir",
    "load_curve",
    "step_label",
    "step_of_name",
    "step_paths",
    "training_run_of",
    "versus_base",
]


def load_curve(
    directory: Path,
    read: StepReader,
    max_drop: float = 0.0,
    paths: list[Path] | None = None,
    load: StepLoader = load_results,
) -> Curve:
    """Every step of a training run, with each metric's estimate and its paired difference from the base.

    ``paths`` are the step files (default: those in ``directory``); ``read`` gives a step's header, summary and
    status, and ``load`` its records for the comparisons. A step regressed on a metric when
    :func:`evalsi.stats.is_regression` says so with ``max_drop``.

    Raises:
        DataError: A step file is not a readable results file.

    """
    files = step_paths(directory) if paths is None else paths
    return read_curve(files, read, load, training_run="", spec=directory.name, max_drop=max_drop)


def training_run_of(curve: Curve, directory: Path) -> str:
    """The curve's training run: as its steps' ``checkpoint`` sections name it, else its directory's parent's name."""
    return curve.training_run or directory.parent.name


def versus_base(point: CurvePoint) -> dict[str, dict[str, Any]]:
    """A step's difference from the base per metric, as the page and its JSON show it."""
    out: dict[str, dict[str, Any]] = {}
    for metric, comparison in point.changes.items():
        d = comparison.difference
        out[metric] = {
            "difference": _clean(d.mean),
            "ciLow": _clean(d.ci_low),
            "ciHigh": _clean(d.ci_high),
            "method": d.method,
            "significant": comparison.significant,
            "regressed": point.regressed_on(metric),
        }
    return out


def step_label(point: CurvePoint) -> int | str:
    """A point's step as the page's JSON gives it: the number, or ``base``."""
    return BASE if point.step is None else point.step


def _clean(value: float) -> float | None:
    return None if math.isnan(value) else value
