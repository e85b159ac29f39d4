"""Checkpoint evaluations as held-out evidence for the training monitors (reward up while held-out flat)."""

from __future__ import annotations

import logging
from typing import Any

from evalsi.errors import DataError
from evalsi.runs import load_results, record_values

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
