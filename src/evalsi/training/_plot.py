"""Drawing the learning curve: each metric's mean per step with its 95% interval, the base, the regressions.

``.html`` is one self-contained file (inline SVG, no scripts or downloads); ``.png``,
``.svg`` and ``.pdf`` are drawn by matplotlib (the ``plot`` extra).
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from evalsi._util.atomic import atomic_writer
from evalsi._util.axis import nice_ticks, tick_label
from evalsi.errors import EvalsiError
from evalsi.runs._curve import Curve, CurvePoint
from evalsi.stats import EMPTY, describe_method

MATPLOTLIB_SUFFIXES = (".png", ".svg", ".pdf")


class PlotError(EvalsiError, RuntimeError):
    """The curve cannot be drawn in the requested format (an unknown suffix, or matplotlib is missing)."""


def plot_curve(curves: list[Curve], path: Path) -> Path:
    """Draw the curves to ``path``; its suffix picks the format (``.html``, ``.png``, ``.svg``, ``.pdf``).

    Args:
        curves: The curves, one per spec.
        path: The file to write.

    Returns:
        ``path``.

    """
    suffix = path.suffix.lower()
    if suffix == ".html":
        with atomic_writer(path) as handle:
            handle.write(curve_html(curves).encode())
        return path
    if suffix in MATPLOTLIB_SUFFIXES:
        _matplotlib(curves, path)
        return path
    raise PlotError(f"--plot {path}: use a .html file (self-contained) or .png/.svg/.pdf (matplotlib)")


def _series(curve: Curve, metric: str) -> list[tuple[CurvePoint, float, float, float]]:
    """``(point, mean, low, high)`` of the steps (not the base) with a value for the metric."""
    out = []
    for point in curve.points:
        est = point.means.get(metric, EMPTY)
        if point.step is None or math.isnan(est.mean):
            continue
        low = est.mean if math.isnan(est.ci_low) else est.ci_low
        high = est.mean if math.isnan(est.ci_high) else est.ci_high
        out.append((point, est.mean, low, high))
    return out


def _matplotlib(curves: list[Curve], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError(
            f"--plot {path.name} needs matplotlib: pip install 'evalsi[plot]' "
            "(or use --plot curve.html, which needs nothing)"
        ) from None
    panels = [(curve, metric) for curve in curves for metric in curve.metrics]
    figure, axes = plt.subplots(len(panels), 1, figsize=(7, 3.2 * len(panels)), squeeze=False)
    for (curve, metric), ax in zip(panels, axes[:, 0], strict=True):
        series = _series(curve, metric)
        steps = [p.step for p, *_ in series]
        means = [m for _, m, _, _ in series]
        errors = [[m - lo for _, m, lo, _ in series], [hi - m for _, m, _, hi in series]]
        methods = sorted({describe_method(p.means[metric].method) for p, *_ in series if p.means[metric].method})
        label = f"checkpoint (95% CI: {', '.join(methods)})" if methods else "checkpoint"
        ax.errorbar(steps, means, yerr=errors, marker="o", capsize=3, label=label)
        ax.grid(True, color="#e5e5e5")
        base = curve.base
        base_est = base.means.get(metric, EMPTY) if base is not None else EMPTY
        if not math.isnan(base_est.mean):
            ax.axhline(base_est.mean, color="grey", linestyle="--", label=f"base {base_est.mean:.3f}")
            if not math.isnan(base_est.ci_low):
                ax.axhspan(base_est.ci_low, base_est.ci_high, color="grey", alpha=0.15)
        bad = [(p.step, m) for p, m, _, _ in series if p.regressed_on(metric)]
        if bad:
            ax.scatter(
                [s for s, _ in bad], [m for _, m in bad], color="red", marker="x", s=90, zorder=5, label="regression"
            )
        ax.set_title(f"{curve.spec}: {metric} ({curve.training_run})")
        ax.set_xlabel("step")
        ax.set_ylabel(metric)
        ax.legend(loc="best", fontsize="small")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)


def curve_html(curves: list[Curve]) -> str:
    """A self-contained HTML page: one SVG chart per metric, then the curve's table."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>learning curve</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}"
        "td,th{padding:2px 10px;text-align:right}th{border-bottom:1px solid #999}.bad{color:#c00}"
        "</style></head><body>"
    ]
    for curve in curves:
        parts.append(f"<h1>{html.escape(curve.spec)} · {html.escape(curve.training_run)}</h1>")
        for metric in curve.metrics:
            parts.append(f"<h2>{html.escape(metric)}</h2>")
            parts.append(_svg(curve, metric))
        parts.append(_table(curve))
    methods = sorted({est.method for c in curves for p in c.points for est in p.means.values() if est.method})
    changes = sorted({d.difference.method for c in curves for p in c.points for d in p.changes.values()})
    note = "; ".join(
        part
        for part in (
            "bars: 95% CI (" + ", ".join(map(describe_method, methods)) + ")" if methods else "",
            "changes: " + ", ".join(map(describe_method, [m for m in changes if m])) if any(changes) else "",
        )
        if part
    )
    parts.append(
        f"<p>* a significant change from the base (95% CI excludes 0); ! a regression. {html.escape(note)}</p>"
        "</body></html>"
    )
    return "".join(parts)


def _svg(curve: Curve, metric: str, width: int = 640, height: int = 280) -> str:
    """One metric's chart, steps on a numeric x axis.

    Round ticks and gridlines on both axes, the base's mean as a dashed line over its interval, each step's mean
    with its interval, regressions in red.
    """
    series = _series(curve, metric)
    base = curve.base
    base_est = base.means.get(metric, EMPTY) if base is not None else EMPTY
    values = [v for _, m, lo, hi in series for v in (m, lo, hi)]
    values += [v for v in (base_est.mean, base_est.ci_low, base_est.ci_high) if not math.isnan(v)]
    if not values:
        return "<p>no values</p>"
    y_ticks = nice_ticks(min(values), max(values))
    low, high = y_ticks[0], y_ticks[-1]
    steps = [p.step or 0 for p, *_ in series] or [0]
    x_ticks = nice_ticks(min(0, *steps), max(steps), 6)
    first, last = x_ticks[0], x_ticks[-1]
    left, right, top, bottom = 56, width - 20, 15, height - 40

    def x(step: float) -> float:
        return left + (step - first) / ((last - first) or 1) * (right - left)

    def y(value: float) -> float:
        return bottom - (value - low) / ((high - low) or 1) * (bottom - top)

    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
        f"aria-label='{html.escape(metric)} per step'>",
    ]
    for tick in y_ticks:
        out.append(
            f"<line x1='{left}' x2='{right}' y1='{y(tick):.1f}' y2='{y(tick):.1f}' stroke='#e5e5e5'/>"
            f"<text x='{left - 6}' y='{y(tick) + 4:.1f}' font-size='10' text-anchor='end'>{tick_label(tick)}</text>"
        )
    for tick in x_ticks:
        out.append(
            f"<line x1='{x(tick):.1f}' x2='{x(tick):.1f}' y1='{top}' y2='{bottom}' stroke='#eeeeee'/>"
            f"<text x='{x(tick):.1f}' y='{bottom + 15}' font-size='10' text-anchor='middle'>{tick_label(tick)}</text>"
        )
    out.append(f"<line x1='{left}' y1='{bottom}' x2='{right}' y2='{bottom}' stroke='#999'/>")
    out.append(f"<line x1='{left}' y1='{top}' x2='{left}' y2='{bottom}' stroke='#999'/>")
    out.append(f"<text x='{(left + right) / 2:.0f}' y='{height - 6}' font-size='11' text-anchor='middle'>step</text>")
    if not math.isnan(base_est.mean):
        if not math.isnan(base_est.ci_low):
            out.append(
                f"<rect x='{left}' y='{y(base_est.ci_high):.1f}' width='{right - left}' "
                f"height='{max(0.5, y(base_est.ci_low) - y(base_est.ci_high)):.1f}' fill='#888' "
                "fill-opacity='0.15'/>"
            )
        out.append(
            f"<line class='base' x1='{left}' x2='{right}' y1='{y(base_est.mean):.1f}' "
            f"y2='{y(base_est.mean):.1f}' stroke='#777' stroke-dasharray='5,4'/>"
            f"<text x='{right}' y='{y(base_est.mean) - 4:.1f}' font-size='10' text-anchor='end'>"
            f"base {base_est.mean:.3f}</text>"
        )
    path = " ".join(f"{'M' if i == 0 else 'L'}{x(p.step or 0):.1f},{y(m):.1f}" for i, (p, m, _, _) in enumerate(series))
    if path:
        out.append(f"<path d='{path}' fill='none' stroke='#1f77b4' stroke-width='2'/>")
    for point, mean, lo, hi in series:
        px = x(point.step or 0)
        bad = point.regressed_on(metric)
        colour = "#c00" if bad else "#1f77b4"
        method = describe_method(point.means[metric].method)
        out.append(f"<line x1='{px:.1f}' x2='{px:.1f}' y1='{y(lo):.1f}' y2='{y(hi):.1f}' stroke='{colour}'/>")
        out.append(
            f"<circle class='{'regression' if bad else 'step'}' cx='{px:.1f}' cy='{y(mean):.1f}' r='4' "
            f"fill='{colour}'><title>step {point.step}: {mean:.4f} [{lo:.4f}, {hi:.4f}]"
            f"{html.escape(f' ({method})' if method else '')}{' regression' if bad else ''}</title></circle>"
        )
    out.append("</svg>")
    return "".join(out)


def _table(curve: Curve) -> str:
    rows = ["<table><tr><th>step</th>", *(f"<th>{html.escape(m)}</th>" for m in curve.metrics), "<th>status</th></tr>"]
    for point in curve.points:
        cells = [f"<td>{point.label}</td>"]
        for metric in curve.metrics:
            text = cell_text(point, metric)
            cells.append(f"<td class='{'bad' if point.regressed_on(metric) else ''}'>{html.escape(text)}</td>")
        cells.append(f"<td class='{'bad' if point.status != 'ok' else ''}'>{point.status}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    rows.append("</table>")
    return "".join(rows)


def cell_text(point: CurvePoint, metric: str) -> str:
    """``0.731 (+0.019)``, with ``*`` for a significant change and ``!`` for a regression.

    Args:
        point: One step of a curve.
        metric: The metric's name.

    """
    est = point.means.get(metric, EMPTY)
    if math.isnan(est.mean):
        return "-"
    change = point.changes.get(metric)
    if change is None or math.isnan(change.difference.mean):
        return f"{est.mean:.3f}"
    mark = "!" if point.regressed_on(metric) else "*" if change.significant else ""
    return f"{est.mean:.3f} ({change.difference.mean:+.3f}{mark})"
