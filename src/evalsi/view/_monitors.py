"""The training monitors a trainer logged, drawn under its training reward on a learning curve's page.

One small chart per logged signal on the evaluations' step axis, its threshold as a red dashed line and the steps
it fired at as red points; a table lists each signal that fired with the first step, its value there and the rule.
The threshold line is the level the trainer logged (``monitor/<signal>/threshold``: for a rise over the run's
baseline, the baseline plus the rise) when the logs carry it, else the documented threshold
(:func:`evalsi.monitors.rule`), a rise drawn from the first logged value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from evalsi._util.trainer_logs import RewardStream
from evalsi.monitors import SIGNALS, Rule, rule
from evalsi.view import _charts

HEIGHT = 170
"""A monitor's chart is lower than the evaluations' (same width and x scale, so its steps line up with theirs)."""


@dataclass(frozen=True)
class MonitorView:
    """One logged monitor: its chart, its rule (None when it has no threshold of its own) and when it fired."""

    name: str
    chart: Markup
    rule: Rule | None
    level: float | None
    """Where the threshold line is drawn: the last logged threshold, else the documented one (a rise over the
    baseline: the first logged value plus the rise)."""
    fired: list[int]
    first_value: float | None
    """The value logged at the first step it fired at (None when the step has no value logged)."""


def threshold_level(
    found: Rule | None, points: list[tuple[int, float]], logged: list[tuple[int, float]] | None = None
) -> float | None:
    """Where a monitor's threshold line goes on its value's scale, or None when it has none.

    The last threshold the trainer logged (``monitor/<signal>/threshold``) wins: for a rise it is the baseline
    the monitor measured plus the rise. Logs without it (older ones, other loggers) get the documented threshold,
    and a rise over the run's baseline is drawn from the first logged value, which is the baseline batches' own
    mean (a guide; the fired steps are what the monitor decided).

    Example:
        >>> from evalsi.monitors import rule
        >>> threshold_level(rule("truncation_rate"), [(1, 0.25), (2, 0.5)])
        0.45
        >>> threshold_level(rule("length_drift"), [(1, 1.0)])
        1.5
        >>> threshold_level(rule("truncation_rate"), [(1, 0.25), (2, 0.5)], [(1, 0.4), (2, 0.3)])
        0.3

    """
    if logged:
        return logged[-1][1]
    if found is None:
        return None
    if found.kind == "rise":
        return points[0][1] + found.threshold if points else None
    return found.threshold


def monitor_views(stream: RewardStream, x_range: tuple[float, float]) -> list[MonitorView]:
    """A chart per monitor in ``stream`` (known signals first, in their documented order), on ``x_range``."""
    names = sorted({*stream.monitors, *stream.fired}, key=_order)
    views = []
    for name in names:
        points = stream.monitors.get(name, [])
        values = dict(points)
        found = rule(name)
        logged = stream.thresholds.get(name, [])
        level = threshold_level(found, points, logged)
        fired = stream.fired.get(name, [])
        line = _charts.Line(
            name, [_charts.Point(float(s), v, tip=f"step {s}: {v:.4g}") for s, v in _charts.thin(points)], markers=False
        )
        fired_points = _charts.thin([(s, values[s]) for s in fired if s in values])
        marks = [_charts.Point(float(s), v, tip=f"fired at step {s}: {v:.4g}") for s, v in fired_points]
        threshold = None
        if level is not None and (found is not None or logged):
            threshold = _charts.Reference(level, None, None, _threshold_label(found, level, bool(logged)))
        chart = _charts.line_chart(
            [line], f"monitor {name}", x_range=x_range, legend=False, threshold=threshold, fired=marks, height=HEIGHT
        )
        first = values.get(fired[0]) if fired else None
        views.append(MonitorView(name, chart, found, level, fired, first))
    return views


def monitors_json(stream: RewardStream) -> dict[str, dict[str, Any]]:
    """The monitors for ``/api/curves/<id>``: each signal's points, fired steps and rule."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted({*stream.monitors, *stream.fired}, key=_order):
        found = rule(name)
        points = stream.monitors.get(name, [])
        out[name] = {
            "points": points,
            "fired": stream.fired.get(name, []),
            "threshold": None if found is None else found.threshold,
            "thresholdField": None if found is None else found.field,
            "firesWhen": None if found is None else found.text,
            "thresholdLevel": threshold_level(found, points, stream.thresholds.get(name)),
            "thresholds": stream.thresholds.get(name, []),
        }
    return out


def _threshold_label(found: Rule | None, level: float, logged: bool) -> str:
    """The threshold line's label: the rule, and whether the level was logged or is the documented guide."""
    if logged:
        return f"threshold {level:.4g} (logged)" + (f": {found.text}" if found is not None else "")
    assert found is not None
    return f"threshold {found.text}" if found.kind != "rise" else f"first value + {found.threshold:g}"


def _order(name: str) -> tuple[int, str]:
    return (SIGNALS.index(name), "") if name in SIGNALS else (len(SIGNALS), name)
