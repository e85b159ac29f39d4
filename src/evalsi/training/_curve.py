"""The learning curve of a spec over a training run, read from its step files under a log directory.

Read from the step results files alone, so the curve is the same whoever evaluated the steps (a watcher, a
trainer callback, ``checkpoints eval``). The curve itself, the step-file layout and the regression rule are
:mod:`evalsi.runs._curve`'s (the viewer reads the same curve).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalsi.errors import DataError
from evalsi.runs import LoadedRun, RunResult, load_run_result
from evalsi.runs._compare import run_from_result
from evalsi.runs._curve import Curve, CurvePoint, read_curve, step_files, summary_estimates
from evalsi.stats import RegressionRule

__all__ = ["Curve", "CurvePoint", "build_curve", "summary_estimates"]


def build_curve(
    log_dir: Path, training_run: str, spec: str, metrics: Sequence[str], rules: Sequence[RegressionRule] = ()
) -> Curve:
    """Read a spec's step files for a training run and compare each step with the base (each file read once).

    Args:
        log_dir: The evaluation log directory.
        training_run: The training run's name.
        spec: The run spec's name.
        metrics: The metrics to show and compare with the base.
        rules: Regression rules to check each step against.

    Raises:
        DataError: No step of this spec and training run was evaluated under ``log_dir``, or a file is broken.

    """
    files = step_files(log_dir, training_run, spec)
    if not files:
        raise DataError(
            f"no results for spec {spec!r} of training run {training_run!r} under {log_dir} "
            "(evaluate with `evalsi checkpoints eval` or `watch` first, with the same --log-dir)"
        )
    results: dict[Path, RunResult] = {}

    def result(path: Path) -> RunResult:
        if path not in results:
            results[path] = load_run_result(path)
        return results[path]

    def read(path: Path) -> tuple[Mapping[str, Any], Mapping[str, Any], str]:
        found = result(path)
        summary = found.summary.model_dump(by_alias=True) if found.summary is not None else {}
        return found.header_json(), summary, found.status

    def load(path: Path) -> LoadedRun:
        return run_from_result(result(path), str(path))

    return read_curve(files.values(), read, load, training_run=training_run, spec=spec, metrics=metrics, rules=rules)
