"""Small SVG charts drawn on the server (no charting script, nothing fetched: the viewer works offline).

Every label is escaped; bars and points are links, so a click works without JavaScript.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeGuard

from markupsafe import Markup, escape

from evalsi._util.axis import nice_ticks, tick_label
from evalsi.view._rewards import Histogram

WIDTH, HEIGHT = 560, 200
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 12, 30


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def histogram_svg(hist: Histogram, href: Callable[[int], str], title: str) -> Markup:
    """Bars of a histogram; bar ``b`` links to ``href(b)`` and says its interval and count on hover."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    peak = max(hist.counts) or 1
    bar_w = plot_w / len(hist.counts)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
        f'<line class="axis" x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}"/>',
        f'<text class="tick" x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end">{peak}</text>',
        f'<text class="tick" x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end">0</text>',
    ]
    for b, count in enumerate(hist.counts):
        if count == 0:
            continue
        low, high = hist.edges(b)
        h = plot_h * count / peak
        x = LEFT + b * bar_w
        tip = f"[{_fmt(low)}, {_fmt(high)}): {count}"
        parts.append(
            f'<a href="{escape(href(b))}" class="bar-link" data-bin="{b}"><rect class="bar" '
            f'x="{x + 1:.1f}" y="{TOP + plot_h - h:.1f}" width="{max(bar_w - 2, 1):.1f}" height="{h:.1f}">'
            f"<title>{escape(tip)}</title></rect></a>"
        )
    parts.append(f'<text class="tick" x="{LEFT}" y="{HEIGHT - 10}">{escape(_fmt(hist.low))}</text>')
    parts.append(
        f'<text class="tick" x="{LEFT + plot_w}" y="{HEIGHT - 10}" text-anchor="end">{escape(_fmt(hist.high))}</text>'
    )
    parts.append("</svg>")
    return Markup("".join(parts))


@dataclass(frozen=True)
class Point:
    """One point of a line: a step, its mean and 95% interval, and how to show it."""

    x: float
    mean: float
    low: float | None = None
    high: float | None = None
    regressed: bool = False
    live: bool = False
    """A step still being evaluated (drawn hollow)."""
    href: str = ""
    tip: str = ""


@dataclass(frozen=True)
class Reference:
    """A horizontal reference: the base model's mean, with its interval as a band."""

    mean: float
    low: float | None
    high: float | None
    label: str


@dataclass(frozen=True)
class Line:
    """One series: its points in step order and, optionally, its base as a reference line."""

    label: str
    points: Sequence[Point]
    reference: Reference | None = None
    markers: bool = True
    """Draw each point (with its interval); a dense series (a trainer's log) is drawn as a line alone."""


CHART_W, CHART_H = 720, 260
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 56, 16, 14, 40
SERIES_CLASSES = 8
"""Series colours (``series-0`` … ``series-7`` in the stylesheet), reused in turn past eight lines."""


MAX_LINE_POINTS = 2000
"""A dense series (a trainer's log over many steps) is drawn through at most this many of its points."""


def thin(points: Sequence[tuple[int, float]], limit: int = MAX_LINE_POINTS) -> list[tuple[int, float]]:
    """At most ``limit`` points of a long series, evenly spread from its first to its last, so a page stays small.

    Example:
        >>> thin([(s, 0.0) for s in range(10)], 4)
        [(0, 0.0), (3, 0.0), (6, 0.0), (9, 0.0)]

    """
    if len(points) <= limit:
        return list(points)
    if limit < 2:
        return list(points[-1:])
    last = len(points) - 1
    return [points[round(i * last / (limit - 1))] for i in range(limit)]


def x_domain(*groups: Iterable[float]) -> tuple[float, float]:
    """The step range charts that share an x axis draw: from 0 (the base) to the last step, at round ticks."""
    xs = [x for group in groups for x in group]
    ticks = nice_ticks(min([0.0, *xs]), max([1.0, *xs]), 6)
    return ticks[0], ticks[-1]


def line_chart(
    lines: Sequence[Line],
    title: str,
    *,
    x_label: str = "step",
    x_range: tuple[float, float] | None = None,
    legend: bool | None = None,
    threshold: Reference | None = None,
    fired: Sequence[Point] = (),
    height: int = CHART_H,
) -> Markup:
    """Lines over a numeric x axis (steps spaced by their value), with round ticks and gridlines on both axes.

    Each point shows its 95% interval as a bar; a line's reference (the base) is a dashed line over its interval's
    band; regressions are red with a ``!``; points link to their runs; a step still running is drawn hollow.
    ``x_range`` makes charts that show the same steps share their x axis (the evals and the trainer's rewards).
    ``threshold`` is a red dashed line at the level a training monitor fires at (its label says the rule), and
    ``fired`` the steps it fired at, drawn as red points. ``height`` makes a smaller chart on the same x scale.
    """
    plot_w, plot_h = CHART_W - PAD_LEFT - PAD_RIGHT, height - PAD_TOP - PAD_BOTTOM
    ys = [v for line in lines for p in line.points for v in (p.mean, p.low, p.high) if _finite(v)]
    ys += [v for line in lines if line.reference for v in _reference_values(line.reference)]
    ys += [p.mean for p in fired if _finite(p.mean)]
    if ys and threshold is not None and _finite(threshold.mean):
        ys.append(threshold.mean)
    if not ys:
        return Markup(f'<p class="empty">{escape(title)}: no values yet</p>')
    y_ticks = nice_ticks(min(ys), max(ys), 5 if height >= CHART_H else 3)
    y_lo, y_hi = y_ticks[0], y_ticks[-1]
    x_lo, x_hi = x_range or x_domain(p.x for line in lines for p in line.points)
    x_ticks = [t for t in nice_ticks(x_lo, x_hi, 6) if x_lo - 1e-9 <= t <= x_hi + 1e-9]

    def x(value: float) -> float:
        return PAD_LEFT + plot_w * (value - x_lo) / ((x_hi - x_lo) or 1)

    def y(value: float) -> float:
        return PAD_TOP + plot_h * (1 - (value - y_lo) / ((y_hi - y_lo) or 1))

    bottom = PAD_TOP + plot_h
    parts = [
        f'<svg class="chart line-chart" viewBox="0 0 {CHART_W} {height}" role="img" aria-label="{escape(title)}" '
        f'data-x-min="{x_lo:g}" data-x-max="{x_hi:g}">'
    ]
    for t in y_ticks:
        parts.append(
            f'<line class="grid" x1="{PAD_LEFT}" y1="{y(t):.1f}" x2="{PAD_LEFT + plot_w}" y2="{y(t):.1f}"/>'
            f'<text class="tick y-tick" x="{PAD_LEFT - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{tick_label(t)}</text>'
        )
    for t in x_ticks:
        parts.append(
            f'<line class="grid" x1="{x(t):.1f}" y1="{PAD_TOP}" x2="{x(t):.1f}" y2="{bottom}"/>'
            f'<text class="tick x-tick" x="{x(t):.1f}" y="{bottom + 15}" text-anchor="middle">{tick_label(t)}</text>'
        )
    parts.append(f'<line class="axis" x1="{PAD_LEFT}" y1="{bottom}" x2="{PAD_LEFT + plot_w}" y2="{bottom}"/>')
    parts.append(f'<line class="axis" x1="{PAD_LEFT}" y1="{PAD_TOP}" x2="{PAD_LEFT}" y2="{bottom}"/>')
    parts.append(
        f'<text class="axis-label" x="{PAD_LEFT + plot_w / 2:.0f}" y="{height - 6}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    for i, line in enumerate(lines):
        series = f"series-{i % SERIES_CLASSES}"
        ref = line.reference
        if ref is not None:
            if _finite(ref.low) and _finite(ref.high):
                top, low = y(ref.high), y(ref.low)
                parts.append(
                    f'<rect class="band {series}" x="{PAD_LEFT}" y="{top:.1f}" width="{plot_w}" '
                    f'height="{max(low - top, 0.5):.1f}"/>'
                )
            parts.append(
                f'<line class="base {series}" x1="{PAD_LEFT}" y1="{y(ref.mean):.1f}" x2="{PAD_LEFT + plot_w}" '
                f'y2="{y(ref.mean):.1f}"><title>{escape(ref.label)}</title></line>'
            )
            if len(lines) == 1:
                parts.append(
                    f'<text class="base-label" x="{PAD_LEFT + plot_w - 4}" y="{y(ref.mean) - 5:.1f}" '
                    f'text-anchor="end">{escape(ref.label)}</text>'
                )
        drawn = [p for p in line.points if _finite(p.mean)]
        if len(drawn) > 1:
            path = " ".join(f"{x(p.x):.1f},{y(p.mean):.1f}" for p in drawn)
            parts.append(
                f'<polyline class="line {series}" points="{path}"><title>{escape(line.label)}</title></polyline>'
            )
        if not line.markers:
            continue
        for p in drawn:
            px, py = x(p.x), y(p.mean)
            if _finite(p.low) and _finite(p.high):
                parts.append(
                    f'<line class="ci {series}" x1="{px:.1f}" y1="{y(p.low):.1f}" x2="{px:.1f}" y2="{y(p.high):.1f}"/>'
                )
            classes = " ".join(
                c for c in ("point", series, "regressed" if p.regressed else "", "live" if p.live else "") if c
            )
            circle = (
                f'<circle class="{classes}" cx="{px:.1f}" cy="{py:.1f}" r="5" data-step="{p.x:g}">'
                f"<title>{escape(p.tip)}</title></circle>"
            )
            if p.href:
                circle = f'<a href="{escape(p.href)}" class="step-link" data-step="{p.x:g}">{circle}</a>'
            parts.append(circle)
            if p.regressed:
                parts.append(f'<text class="mark" x="{px + 7:.1f}" y="{py - 6:.1f}">!</text>')
    if threshold is not None and _finite(threshold.mean):
        ty = y(threshold.mean)
        parts.append(
            f'<line class="threshold" x1="{PAD_LEFT}" y1="{ty:.1f}" x2="{PAD_LEFT + plot_w}" y2="{ty:.1f}" '
            f'data-threshold="{threshold.mean:g}"><title>{escape(threshold.label)}</title></line>'
            f'<text class="threshold-label" x="{PAD_LEFT + plot_w - 4}" y="{ty - 5:.1f}" text-anchor="end">'
            f"{escape(threshold.label)}</text>"
        )
    for p in fired:
        if _finite(p.mean):
            parts.append(
                f'<circle class="fired" cx="{x(p.x):.1f}" cy="{y(p.mean):.1f}" r="4" data-step="{p.x:g}">'
                f"<title>{escape(p.tip)}</title></circle>"
            )
    parts.append("</svg>")
    show_legend = len(lines) > 1 if legend is None else legend
    if show_legend:
        parts.append('<ul class="legend">')
        for i, line in enumerate(lines):
            parts.append(f'<li><span class="swatch series-{i % SERIES_CLASSES}"></span>{escape(line.label)}</li>')
        parts.append("</ul>")
    return Markup("".join(parts))


def _finite(value: float | None) -> TypeGuard[float]:
    return value is not None and not math.isnan(value)


def _reference_values(ref: Reference) -> list[float]:
    return [v for v in (ref.mean, ref.low, ref.high) if _finite(v)]
