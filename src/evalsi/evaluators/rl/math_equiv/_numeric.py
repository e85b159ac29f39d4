r"""The pure-Python fast path: parse canonical answers into exact numbers and compare them, without sympy.

It decides numbers (``1,234``, ``-3.5``, ``.5``, ``1.5e3``, ``1.5\times10^{3}``, ``2^{10}``), fractions
(``3/4``, ``\frac{3}{4}``), percentages, assignments (``x=5``), and tuples, sets and intervals of those. What it
cannot parse is *undecided* (``None``) and goes to the symbolic backend. Its verdicts follow math-verify's:

- exact rationals (integers, fractions) compare exactly;
- when either side is written as a decimal, an integer still compares exactly (``12`` ≠ ``12.0000004``) and
  any other value compares rounded to ``float_rounding`` decimals (``1/3`` = ``0.333333``);
- ``p%`` equals ``p/100`` and also ``p`` as written (``50%`` = ``0.5`` = ``50``): a model that answers "50" to
  "what percentage…" is right, as is one that answers 0.5;
- a pair ``(a, b)`` is an open interval or a 2-tuple (the same test); ``[a, b)`` and ``(a, b]`` are intervals,
  open and closed ends distinguished; ``\{…\}`` is a set (order and repeats ignored).

Huge numbers are not built: over ``MAX_DIGITS`` digits, or a power/exponent too large, is undecided.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

MAX_DIGITS = 400
"""Larger numbers are left to the symbolic backend (and its timeout) rather than built here."""

Kind = Literal["set", "tuple", "pair", "interval"]

_NUMBER = re.compile(r"(?P<sign>[-+]?)(?P<int>\d{1,3}(?:,\d{3})+|\d+)?(?:\.(?P<frac>\d*))?(?:[eE](?P<exp>[-+]?\d+))?")
_TIMES_TEN = re.compile(r"(?:\\times|\\cdot|\*|×)10\^(?:\{(?P<a>[-+]?\d+)\}|(?P<b>[-+]?\d))")
_POWER = re.compile(r"(?P<base>\d+)\^(?:\{(?P<a>[-+]?\d+)\}|(?P<b>\d))")
_FRAC = re.compile(r"(?P<sign>-?)\\frac\{(?P<num>[^{}]+)\}\{(?P<den>[^{}]+)\}")
_ASSIGNMENT = re.compile(r"(?P<var>[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?)=(?P<rhs>[^=<>]+)")
_INFINITY = re.compile(r"(?P<sign>[-+]?)\\infty")


@dataclass(frozen=True, slots=True)
class Num:
    """An exact number and how it was written."""

    value: Fraction
    decimal: bool = False
    """Written with a decimal point or an exponent (math-verify's ``Float``)."""
    percent: bool = False
    var: str | None = None
    """The variable of an assignment answer such as ``x=5``."""
    infinite: int = 0
    """+1 or -1 for ±∞ (interval ends only); ``value`` is then 0."""
    ulp: Fraction | None = None
    """A decimal's last written place (``0.001`` for ``1.234``), None when unknown or exact."""
    digits: int = 0
    """A decimal's count of significant digits as written (``6.12e-8``: 3)."""


@dataclass(frozen=True, slots=True)
class Group:
    """A tuple, set, pair or interval of numbers."""

    kind: Kind
    items: tuple[Num, ...]
    left_closed: bool = False
    right_closed: bool = False


Value = Num | Group


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How close two decimals must be."""

    float_rounding: int = 6
    rel_tol: float = 0.0
    percent: Literal["lenient", "strict"] = "lenient"
    significant_digits: int = 6


def parse_value(canonical: str) -> Value | None:
    """The value of a canonical answer, or None when the fast path cannot parse it."""
    assignment = _ASSIGNMENT.fullmatch(canonical)
    if assignment is not None:
        inner = parse_value(assignment.group("rhs"))
        if isinstance(inner, Num) and inner.var is None:
            return Num(inner.value, inner.decimal, inner.percent, assignment.group("var"), 0, inner.ulp, inner.digits)
        return None
    if canonical[:1] in ("(", "[") or canonical.startswith("\\{"):
        return _parse_group(canonical)
    return parse_number(canonical)


def _parse_group(text: str) -> Group | None:
    if text.startswith("\\{") and text.endswith("\\}"):
        items = _items(text[2:-2], infinite_ok=False)
        return Group("set", items) if items is not None else None
    opener, closer = text[0], text[-1]
    if opener not in "([" or closer not in ")]":
        return None
    items = _items(text[1:-1], infinite_ok=True)
    if items is None or len(items) < 2:
        return None
    if len(items) == 2:
        if opener == "(" and closer == ")":
            return Group("pair", items)
        return Group("interval", items, opener == "[", closer == "]")
    if opener == "(" and closer == ")" and not any(i.infinite for i in items):
        return Group("tuple", items)
    return None


def _items(body: str, *, infinite_ok: bool) -> tuple[Num, ...] | None:
    parts = _split_top_level(body)
    if parts is None:
        return None
    out: list[Num] = []
    for part in parts:
        infinity = _INFINITY.fullmatch(part) if infinite_ok else None
        if infinity is not None:
            out.append(Num(Fraction(0), infinite=-1 if infinity.group("sign") == "-" else 1))
            continue
        number = parse_number(part)
        if number is None:
            return None
        out.append(number)
    return tuple(out)


def _split_top_level(body: str) -> list[str] | None:
    """Split on commas outside braces; None for nested brackets (matrices, tuples of tuples)."""
    if not body or "(" in body or "[" in body:
        return None
    parts: list[str] = []
    depth = start = 0
    for index, char in enumerate(body):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(body[start:index])
            start = index + 1
    parts.append(body[start:])
    return parts


def parse_number(text: str) -> Num | None:
    """One number: plain, with thousands separators, scientific, a fraction, a small power, or a percentage."""
    percent = text.endswith("%")
    if percent:
        text = text[:-1]
    if not text:
        return None
    if "\\frac" in text:
        frac = _FRAC.fullmatch(text)
        if frac is None:
            return None
        num, den = _plain(frac.group("num")), _plain(frac.group("den"))
        if num is None or den is None or den.value == 0:
            return None
        value = num.value / den.value * (-1 if frac.group("sign") else 1)
        return Num(value, num.decimal or den.decimal, percent)
    if "/" in text:
        top, _, bottom = text.partition("/")
        num, den = _plain(top), _plain(bottom)
        if num is None or den is None or den.value == 0:
            return None
        return Num(num.value / den.value, num.decimal or den.decimal, percent)
    number = _plain(text)
    return None if number is None else Num(number.value, number.decimal, percent, None, 0, number.ulp, number.digits)


def _plain(text: str) -> Num | None:
    r"""A number without fraction bars: ``-1,234.5``, ``1.5e3``, ``1.5\times10^{3}``, ``2^{10}``."""
    if text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS:  # the common case, without the regex
        return Num(Fraction(int(text)))
    scale = 0
    times = _TIMES_TEN.search(text)
    if times is not None and times.end() == len(text):
        scale = int(times.group("a") or times.group("b"))
        text = text[: times.start()]
    elif "^" in text:
        return _power(text)
    match = _NUMBER.fullmatch(text)
    if match is None or (match.group("int") is None and not match.group("frac")):
        return None
    digits = (match.group("int") or "0").replace(",", "")
    frac = match.group("frac") or ""
    exponent = int(match.group("exp") or 0) + scale
    if len(digits) + len(frac) > MAX_DIGITS or abs(exponent) > MAX_DIGITS:
        return None
    value = Fraction(int(digits + frac), 10 ** len(frac))
    if exponent:
        value *= Fraction(10) ** exponent
    decimal = match.group("frac") is not None or match.group("exp") is not None
    if not decimal:
        return Num(-value if match.group("sign") == "-" else value)
    ulp = Fraction(10) ** (exponent - len(frac))
    significant = len((digits + frac).lstrip("0")) or 1
    return Num(-value if match.group("sign") == "-" else value, True, ulp=ulp, digits=significant)


def _power(text: str) -> Num | None:
    sign = -1 if text.startswith("-") else 1
    match = _POWER.fullmatch(text.lstrip("-+"))
    if match is None:
        return None
    base, exponent = int(match.group("base")), int(match.group("a") or match.group("b"))
    if base > 1 and abs(exponent) * math.log10(base) > MAX_DIGITS:
        return None
    return Num(sign * Fraction(base) ** exponent)


def equal(a: Value, b: Value, tol: Tolerance) -> bool | None:
    """Whether two parsed answers are equal; None when the fast path cannot tell (different kinds)."""
    if isinstance(a, Num) and isinstance(b, Num):
        if a.var is not None and b.var is not None and a.var != b.var:
            return None
        return numbers_equal(a, b, tol)
    if isinstance(a, Group) and isinstance(b, Group):
        return _groups_equal(a, b, tol)
    return None


def numbers_equal(a: Num, b: Num, tol: Tolerance) -> bool:
    """Equality of two numbers by the module's rules (percentages, decimals, significant digits)."""
    if a.infinite or b.infinite:
        return a.infinite == b.infinite
    if a.percent == b.percent:
        return _close(a, a.value, b, b.value, tol)
    pct, other = (a, b) if a.percent else (b, a)
    if _close(pct, pct.value / 100, other, other.value, tol, scale=Fraction(1, 100)):
        return True
    return tol.percent == "lenient" and _close(pct, pct.value, other, other.value, tol)


def _close(a: Num, x: Fraction, b: Num, y: Fraction, tol: Tolerance, scale: Fraction = Fraction(1)) -> bool:
    """Whether two values are equal as written.

    Exact values compare exactly; a decimal matches when it is the other value rounded at its last written
    place, and is written with at least ``significant_digits`` digits (``0.333333`` is 1/3, ``0.3333`` is not,
    ``6.12e-8`` is not ``6.17e-8``). Between two decimals the coarser one decides.
    """
    if x == y:
        return True
    if tol.rel_tol > 0 and math.isclose(x, y, rel_tol=tol.rel_tol):
        return True
    if not (a.decimal or b.decimal):
        return False
    if (not a.decimal and x.denominator == 1) or (not b.decimal and y.denominator == 1):
        return False  # an integer against a decimal compares exactly, as in math-verify
    decimals = [n for n in (a, b) if n.decimal]
    coarse = max(decimals, key=lambda n: n.ulp if n.ulp is not None else Fraction(0))
    if coarse.ulp is None:
        return abs(x - y) <= Fraction(5, 10**tol.significant_digits) * max(abs(x), abs(y))
    if coarse.digits < tol.significant_digits:
        return False
    ulp = coarse.ulp * (scale if coarse is a else 1)
    return abs(x - y) <= ulp / 2


def _groups_equal(a: Group, b: Group, tol: Tolerance) -> bool | None:
    if a.kind == "set" or b.kind == "set":
        if a.kind != b.kind:
            return None
        return all(any(numbers_equal(x, y, tol) for y in b.items) for x in a.items) and all(
            any(numbers_equal(x, y, tol) for x in a.items) for y in b.items
        )
    if (a.kind == "pair" and not _ascending(a)) or (b.kind == "pair" and not _ascending(b)):
        return None  # (2, 1) is an empty interval to math-verify, a tuple to a reader
    if len(a.items) != len(b.items):
        return False
    if "interval" in (a.kind, b.kind) and (a.left_closed, a.right_closed) != (b.left_closed, b.right_closed):
        return False
    if "tuple" in (a.kind, b.kind) and a.kind != b.kind:
        return False
    return all(numbers_equal(x, y, tol) for x, y in zip(a.items, b.items, strict=True))


def _ascending(group: Group) -> bool:
    low, high = group.items
    if low.infinite or high.infinite:
        return low.infinite <= 0 <= high.infinite and low.infinite != high.infinite
    return low.value < high.value


_WORD = re.compile(r"\(?([A-Za-z]+)\)?")
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})")


def item_verdict(gold: str, pred: str, tol: Tolerance) -> tuple[bool | None, str]:
    """The pure-Python verdict on two canonical items and how it was reached; None when sympy must decide.

    Same text, clock times, numbers (``numeric``), groups of numbers (``as sets``, ``as intervals``…), or words
    (case-insensitive, ``(C)`` is ``C``).
    """
    if gold == pred:
        return True, "same text"
    clock_a, clock_b = _CLOCK.fullmatch(gold), _CLOCK.fullmatch(pred)
    if clock_a is not None and clock_b is not None:
        same = (int(clock_a.group(1)), clock_a.group(2)) == (int(clock_b.group(1)), clock_b.group(2))
        return same, "clock times"
    a, b = parse_value(gold), parse_value(pred)
    if a is not None and b is not None:
        return equal(a, b, tol), "numeric" if isinstance(a, Num) else f"as {a.kind}s"
    word_a, word_b = _WORD.fullmatch(gold), _WORD.fullmatch(pred)
    if word_a is not None and word_b is not None:
        x, y = word_a.group(1), word_b.group(1)
        if len(x) == 1 and len(y) == 1:
            return (x == y if gold != x or pred != y else None), "words"  # bare letters may be variables
        if len(x) >= 3 and len(y) >= 3:
            return x.lower() == y.lower(), "words"
    return None, "undecided"
