"""Checkpoint evaluations as held-out evidence for the training monitors (reward up while held-out flat)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from evalsi.errors import DataError
from evalsi.monitors import Signal
from evalsi.runs import load_results
from evalsi.runs._summary import record_values

log = logging.getLogger("evalsi.training")


def heldout_values(outcome: Any, metric: str | None = None) -> dict[str, list[float]] | None:
    """A checkpoint evaluation's per-record values of one held-out metric, keyed for pairing.

    Args:
        outcome: A checkpoint evaluation (:class:`~evalsi.training.StepResult`: its specs' results files).
        metric: ``<spec>/<metric>``; by default the first metric of the first spec evaluated.

    Returns:
        ``{record key: sample values}``, or None when the evaluation has no such metric (or no results files).

    """
    for spec in getattr(outcome, "specs", None) or []:
        wanted_spec, _, wanted_metric = (metric or "").partition("/")
        if metric and spec.spec != wanted_spec:
            continue
        try:
            run = load_results(spec.path)
        except DataError as exc:
            log.warning("held-out values of %s: %s", spec.spec, exc)
            return None
        names = [m.name for m in run.metrics]
        name = wanted_metric or (names[0] if names else "")
        if name not in names:
            return None
        return {r.key: record_values(r, name, run.on_error) for r in run.records}
    return None


def fired_in_trainer_state(path: Path, names: Sequence[str]) -> Signal | None:
    """The first of ``names`` a trainer's ``trainer_state.json`` logged as fired (``monitor/<name>/fired`` > 0).

    The reward functions log the monitors through the trainer, and each checkpoint's ``trainer_state.json`` keeps
    the log history, so a watcher outside the training process sees them at every save.

    Args:
        path: A ``trainer_state.json`` (a missing or unreadable file holds nothing).
        names: Monitor names, bare (``length_drift``).

    Returns:
        The earliest fired signal (its logged value, at the step it was logged), or None.

    """
    try:
        state = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    history = state.get("log_history") if isinstance(state, dict) else None
    for entry in history if isinstance(history, list) else []:
        if not isinstance(entry, dict):
            continue
        for name in names:
            fired = entry.get(f"monitor/{name}/fired")
            if isinstance(fired, int | float) and fired > 0:
                value = entry.get(f"monitor/{name}")
                step = entry.get("step")
                return Signal(
                    name,
                    float(value) if isinstance(value, int | float) else None,
                    math.nan,
                    True,
                    f"logged at step {step} in {path}",
                )
    return None
