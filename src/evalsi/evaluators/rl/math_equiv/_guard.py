"""Cheap checks that refuse an answer before any parser sees it.

The worker timeout bounds every comparison, but each overrun costs a whole timeout and a worker restart; these
checks answer the common pathological cases (deep nesting, power towers of integers) in microseconds instead.
"""

from __future__ import annotations

import math
import re

MAX_POWER_DIGITS = 100_000
"""A power of integer literals with more digits than this is refused rather than evaluated."""

_TOWER = re.compile(r"\d+(?:\s*(?:\^|\*\*)\s*[{(]?\s*\d+)+")
_LINK = re.compile(r"\d+")


def nesting_depth(text: str) -> int:
    """Deepest bracket nesting (``{``, ``(``, ``[``) in a text."""
    depth = deepest = 0
    for char in text:
        if char in "{([":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "})]":
            depth -= 1
    return deepest


def huge_power(text: str) -> float | None:
    """The approximate digit count of the largest integer power tower in ``text`` over the limit, else None.

    ``2^{2^{2^{30}}}``, ``10^(10^10)`` and ``9**9**9`` are refused; ``2^{10}`` and ``10^{100}`` pass.
    """
    if "^" not in text and "**" not in text:
        return None
    for tower in _TOWER.finditer(text):
        digits = _tower_digits([int(n) for n in _LINK.findall(tower.group())])
        if digits > MAX_POWER_DIGITS:
            return digits
    return None


def _tower_digits(numbers: list[int]) -> float:
    """Digits of ``a^(b^(c…))``, evaluated from the top in logarithms (floats; overflow is infinity)."""
    value = float(numbers[-1])
    digits = math.log10(value) if value > 1 else 1.0
    for base in reversed(numbers[:-1]):
        if base <= 1:
            value, digits = float(base), 1.0
            continue
        digits = value * math.log10(base)
        if digits > MAX_POWER_DIGITS:
            return digits
        value = 10.0**digits if digits < 300 else math.inf
    return digits
