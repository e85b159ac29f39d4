"""Chart axes: round tick values over a data range (the viewer's charts and ``checkpoints curve --plot``).

Example:
    >>> nice_ticks(0.12, 0.87)
    [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    >>> nice_ticks(0, 1234, 5)
    [0.0, 250.0, 500.0, 750.0, 1000.0, 1250.0]
    >>> tick_label(0.30000000000000004), tick_label(1500.0), tick_label(0.05)
    ('0.3', '1500', '0.05')

"""

from __future__ import annotations

import math

_STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)


def nice_step(span: float, count: int) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) giving about ``count`` intervals over ``span``."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / max(count, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    return next(s * power for s in _STEPS if s * power >= raw * (1 - 1e-9))


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round values from at or below ``low`` to at or above ``high``, about ``count`` intervals apart.

    A range of one value gets ticks around it.
    """
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high < low:
        low, high = high, low
    if high == low:
        pad = abs(low) * 0.1 or 0.5
        low, high = low - pad, high + pad
    step = nice_step(high - low, count)
    first = math.floor(low / step + 1e-9) * step
    ticks = []
    value = first
    while value < high + step * (1 - 1e-9):
        ticks.append(round(value, 12) + 0.0)
        if ticks[-1] >= high - step * 1e-9:
            break
        value = first + step * len(ticks)
    return ticks


def tick_label(value: float) -> str:
    """A tick value as short text: no float noise, no needless zeros."""
    text = f"{value:.6g}"
    if "e" in text:
        return text
    return text.rstrip("0").rstrip(".") if "." in text else text
