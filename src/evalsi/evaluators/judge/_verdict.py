"""Reading a judge's reply: a number in a range, a label mapped to a score, or a structured JSON verdict.

A reply that cannot be read raises :class:`VerdictError`; the evaluator turns it into an ``error`` score with
the reply in the details. Nothing unreadable ever becomes a 0.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

from evalsi.evaluators._patterns import compile_pattern
from evalsi.evaluators.judge._config import (
    DEFAULT_NUMBER_PATTERN,
    JsonVerdict,
    LabelVerdict,
    NumberVerdict,
)

_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL | re.IGNORECASE)
_BARE_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_DEFAULT_NUMBER = re.compile(DEFAULT_NUMBER_PATTERN)


class VerdictError(Exception):
    """The reply holds no readable verdict; the message says what was expected."""


def format_hint(verdict: NumberVerdict | LabelVerdict | JsonVerdict) -> str:
    """The answer-format instruction that fills ``{{format}}``."""
    if isinstance(verdict, NumberVerdict):
        if verdict.pattern is None:
            return (
                f"End your reply with a line 'Score: N', where N is a number from {verdict.min:g} to {verdict.max:g}."
            )
        return f"Give a score from {verdict.min:g} to {verdict.max:g}."
    if isinstance(verdict, LabelVerdict):
        return "End your reply with exactly one of: " + ", ".join(verdict.labels) + "."
    choices = f"a number from {verdict.min:g} to {verdict.max:g}" if verdict.min is not None else "your score"
    if verdict.labels:
        choices = "one of " + ", ".join(f'"{k}"' for k in verdict.labels)
    return f'Reply with a JSON object only, with "{verdict.field}": {choices}, and "reasoning": a short explanation.'


def parse_verdict(text: str, verdict: NumberVerdict | LabelVerdict | JsonVerdict) -> tuple[float, dict[str, Any]]:
    """The score a reply gives, and what was read from it (for the details).

    Raises:
        VerdictError: No readable verdict in the reply.

    """
    if isinstance(verdict, NumberVerdict):
        return _number(text, verdict)
    if isinstance(verdict, LabelVerdict):
        return _label(text, verdict)
    return _json(text, verdict)


def _number(text: str, verdict: NumberVerdict) -> tuple[float, dict[str, Any]]:
    matches = (compile_pattern(verdict.pattern) if verdict.pattern else _DEFAULT_NUMBER).findall(text)
    if matches:
        found = matches[-1] if isinstance(matches[-1], str) else matches[-1][0]
    elif verdict.pattern is None and _BARE_NUMBER.fullmatch(text.strip()):
        found = text.strip()
    else:
        where = f"pattern {verdict.pattern!r}" if verdict.pattern else "a 'Score: N' line"
        raise VerdictError(f"no score found (expected {where})")
    try:
        number = float(found)
    except ValueError:
        raise VerdictError(f"{found!r} is not a number") from None
    return _in_range(number, verdict.min, verdict.max, verdict.rescale), {"verdict": number}


def _in_range(number: float, low: float, high: float, rescale: bool) -> float:
    if not math.isfinite(number) or not low <= number <= high:
        raise VerdictError(f"score {number:g} is outside [{low:g}, {high:g}]")
    return (number - low) / (high - low) if rescale else number


def _label(text: str, verdict: LabelVerdict) -> tuple[float, dict[str, Any]]:
    region = text
    if verdict.pattern is not None:
        matches = compile_pattern(verdict.pattern).finditer(text)
        found = [m.group(1) for m in matches if m.group(1) is not None]
        if not found:
            raise VerdictError(f"pattern {verdict.pattern!r} did not match")
        region = found[-1]
    flags = re.IGNORECASE if verdict.ignore_case else 0
    best: tuple[int, int, str] | None = None  # (end, -start, label): the last mention wins, then the longest
    for label in verdict.labels:
        left = r"\b" if label[:1].isalnum() or label[:1] == "_" else ""
        right = r"\b" if label[-1:].isalnum() or label[-1:] == "_" else ""
        for match in re.finditer(left + re.escape(label) + right, region, flags):
            candidate = (match.end(), -match.start(), label)
            if best is None or candidate[:2] > best[:2]:
                best = candidate
    if best is None:
        raise VerdictError("none of the labels " + ", ".join(repr(k) for k in verdict.labels) + " appears")
    return float(verdict.labels[best[2]]), {"verdict": best[2]}


def _json(text: str, verdict: JsonVerdict) -> tuple[float, dict[str, Any]]:
    obj = _json_object(text)
    value: Any = obj
    for part in verdict.field.split("."):
        if not isinstance(value, dict) or part not in value:
            raise VerdictError(f"the JSON verdict has no field {verdict.field!r}")
        value = value[part]
    details = {"verdict": value, "json": obj}
    if isinstance(value, bool):
        return float(value), details
    if isinstance(value, str) and verdict.labels is not None:
        for label, score in verdict.labels.items():
            if label.casefold() == value.strip().casefold():
                return float(score), details
        raise VerdictError(f"{verdict.field} is {value!r}, not one of {', '.join(map(repr, verdict.labels))}")
    if isinstance(value, str) and _BARE_NUMBER.fullmatch(value.strip()):
        value = float(value)
    if not isinstance(value, int | float):
        raise VerdictError(f"{verdict.field} is {value!r}, not a number")
    if verdict.min is not None and verdict.max is not None:
        return _in_range(float(value), verdict.min, verdict.max, rescale=True), details
    if not math.isfinite(value):
        raise VerdictError(f"{verdict.field} is {value}, not a finite number")
    return float(value), details


def _json_object(text: str) -> dict[str, Any]:
    candidates = [text.strip()]
    candidates += [m.group(1) for m in _FENCE.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            parsed = orjson.loads(candidate)
        except orjson.JSONDecodeError:
            continue
        if isinstance(parsed, dict):
            return parsed
    raise VerdictError("no JSON object found in the reply")
