"""Drawing the learning curve: each metric's mean per step with its 95% interval, the base, the regressions.

``.html`` is one self-contained file (inline SVG, no scripts or downloads); ``.png``,
``.svg`` and ``.pdf`` are drawn by matplotlib (the ``plot`` extra).
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from evalsi._util.atomic import atomic_writer
from evalsi.errors import EvalsiError
from evalsi.stats import EMPTY
from evalsi.training._curve import Curve, CurvePoint

MATPLOTLIB_SUFFIXES = (".png", ".svg", ".pdf")


class PlotError(EvalsiError, RuntimeError):
    """The curve cannot be drawn in the requested format (an unknown suffix, or matplotlib is missing)."""


def plot_curve(curves: list[Curve], path: Path) -> Path:
    """Draw the curves to ``path``; its suffix picks the format (``.html``, ``.png``, ``.svg``, ``.pdf``)."""
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
        ax.errorbar(steps, means, yerr=errors, marker="o", capsize=3, label="checkpoint (95% CI)")
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
    parts.append("<p>* a significant change from the base (95% CI excludes 0); ! a regression.</p></body></html>")
    return "".join(parts)


def _svg(curve: Curve, metric: str, width: int = 640, height: int = 260) -> str:
    series = _series(curve, metric)
    base = curve.base
    base_est = base.means.get(metric, EMPTY) if base is not None else EMPTY
    values = [v for _, m, lo, hi in series for v in (m, lo, hi)]
    values += [v for v in (base_est.mean, base_est.ci_low, base_est.ci_high) if not math.isnan(v)]
    if not values:
        return "<p>no values</p>"
    low, high = min(values), max(values)
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5
    pad = (high - low) * 0.1
    low, high = low - pad, high + pad
    steps = [p.step or 0 for p, *_ in series] or [0]
    first, last = min(steps), max(steps)
    span = (last - first) or 1
    left, right, top, bottom = 50, width - 20, 15, height - 30

    def x(step: float) -> float:
        return left + (step - first) / span * (right - left) if len(series) > 1 else (left + right) / 2

    def y(value: float) -> float:
        return bottom - (value - low) / (high - low) * (bottom - top)

    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
        f"aria-label='{html.escape(metric)} per step'>",
        f"<line x1='{left}' y1='{bottom}' x2='{right}' y2='{bottom}' stroke='#999'/>",
        f"<line x1='{left}' y1='{top}' x2='{left}' y2='{bottom}' stroke='#999'/>",
        f"<text x='{left - 5}' y='{y(high - pad) + 4:.1f}' font-size='10' text-anchor='end'>{high - pad:.3f}</text>",
        f"<text x='{left - 5}' y='{y(low + pad) + 4:.1f}' font-size='10' text-anchor='end'>{low + pad:.3f}</text>",
    ]
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
        out.append(f"<line x1='{px:.1f}' x2='{px:.1f}' y1='{y(lo):.1f}' y2='{y(hi):.1f}' stroke='{colour}'/>")
        out.append(
            f"<circle class='{'regression' if bad else 'step'}' cx='{px:.1f}' cy='{y(mean):.1f}' r='4' "
            f"fill='{colour}'><title>step {point.step}: {mean:.4f} [{lo:.4f}, {hi:.4f}]"
            f"{' regression' if bad else ''}</title></circle>"
        )
        out.append(f"<text x='{px:.1f}' y='{height - 12}' font-size='10' text-anchor='middle'>{point.step}</text>")
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
    """``0.731 (+0.019)``, with ``*`` for a significant change and ``!`` for a regression."""
    est = point.means.get(metric, EMPTY)
    if math.isnan(est.mean):
        return "-"
    change = point.changes.get(metric)
    if change is None or math.isnan(change.difference.mean):
        return f"{est.mean:.3f}"
    mark = "!" if point.regressed_on(metric) else "*" if change.significant else ""
    return f"{est.mean:.3f} ({change.difference.mean:+.3f}{mark})"
