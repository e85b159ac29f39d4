"""Small SVG charts drawn on the server (no charting script, nothing fetched: the viewer works offline).

Every label is escaped; bars and points are links, so a click works without JavaScript.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

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
class CurvePoint:
    """One step on a curve: its label, mean and interval, whether it regressed, and the link to its run."""

    label: str
    mean: float | None
    low: float | None
    high: float | None
    regressed: bool
    href: str


def curve_svg(points: Sequence[CurvePoint], base: float | None, title: str) -> Markup:
    """Means with their 95% intervals per step, the base as a dashed line, regressions in red."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    ys = [v for p in points for v in (p.mean, p.low, p.high) if v is not None and not math.isnan(v)]
    if base is not None:
        ys.append(base)
    if not ys:
        return Markup(f'<p class="empty">{escape(title)}: no values</p>')
    lo, hi = min(ys), max(ys)
    pad = (hi - lo) * 0.1 or 0.05
    lo, hi = lo - pad, hi + pad

    def y(v: float) -> float:
        return TOP + plot_h * (1 - (v - lo) / (hi - lo))

    step = plot_w / max(len(points), 1)
    parts = [
        f'<svg class="chart curve" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
        f'<line class="axis" x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}"/>',
        f'<text class="tick" x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end">{escape(_fmt(hi))}</text>',
        f'<text class="tick" x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end">{escape(_fmt(lo))}</text>',
    ]
    if base is not None:
        parts.append(
            f'<line class="base" x1="{LEFT}" y1="{y(base):.1f}" x2="{LEFT + plot_w}" y2="{y(base):.1f}">'
            f"<title>base {escape(_fmt(base))}</title></line>"
        )
    line = [(LEFT + step * (i + 0.5), y(p.mean)) for i, p in enumerate(points) if p.mean is not None]
    if len(line) > 1:
        parts.append('<polyline class="line" points="' + " ".join(f"{a:.1f},{b:.1f}" for a, b in line) + '"/>')
    for i, p in enumerate(points):
        x = LEFT + step * (i + 0.5)
        parts.append(f'<text class="tick" x="{x:.1f}" y="{HEIGHT - 10}" text-anchor="middle">{escape(p.label)}</text>')
        if p.mean is None:
            continue
        if p.low is not None and p.high is not None:
            parts.append(f'<line class="ci" x1="{x:.1f}" y1="{y(p.low):.1f}" x2="{x:.1f}" y2="{y(p.high):.1f}"/>')
        cls = "point regressed" if p.regressed else "point"
        interval = "" if p.low is None or p.high is None else f" [{_fmt(p.low)}, {_fmt(p.high)}]"
        tip = f"step {p.label}: {_fmt(p.mean)}{interval}{' regressed' if p.regressed else ''}"
        parts.append(
            f'<a href="{escape(p.href)}" class="step-link" data-step="{escape(p.label)}">'
            f'<circle class="{cls}" cx="{x:.1f}" cy="{y(p.mean):.1f}" r="5"><title>{escape(tip)}</title>'
            "</circle></a>"
        )
        if p.regressed:
            parts.append(f'<text class="mark" x="{x + 7:.1f}" y="{y(p.mean) - 6:.1f}">!</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
