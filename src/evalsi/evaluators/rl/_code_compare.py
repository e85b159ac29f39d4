"""Judging one case on the host: stdout against the expected text, a returned value against the expected one."""

from __future__ import annotations

import math
from typing import Any

from evalsi.evaluators.rl._code_cases import TestCase
from evalsi.sandbox import CaseOutcome
from evalsi.sandbox._calls import dec


def normalise_output(text: str) -> str:
    r"""Trailing whitespace of every line and trailing blank lines removed; ``\\r\\n`` read as ``\\n``."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").rstrip().split("\n")
    return "\n".join(line.rstrip() for line in lines)


def same_output(got: str, expected: str, tolerance: float) -> bool:
    """Equal after normalising; with a tolerance, numeric tokens may differ by at most that (relative to 1)."""
    a, b = normalise_output(got), normalise_output(expected)
    if a == b:
        return True
    if tolerance <= 0:
        return False
    ta, tb = a.split(), b.split()
    return len(ta) == len(tb) and all(x == y or _close(x, y, tolerance) for x, y in zip(ta, tb, strict=True))


def _close(x: str, y: str, tolerance: float) -> bool:
    try:
        fx, fy = float(x), float(y)
    except ValueError:
        return False
    return math.isfinite(fx) and math.isfinite(fy) and abs(fx - fy) <= tolerance * max(1.0, abs(fy))


def same_value(got: Any, expected: Any, tolerance: float) -> bool:
    """APPS call-based equality: tuples compare as lists, and an expected ``[x]`` also accepts ``x``."""
    g, e = _jsonish(got), _jsonish(expected)
    if _equal(g, e, tolerance):
        return True
    return isinstance(e, list) and len(e) == 1 and _equal(g, e[0], tolerance)


def _jsonish(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonish(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonish(v) for k, v in value.items()}
    return value


def _equal(a: Any, b: Any, tolerance: float) -> bool:
    if type(a) is float or type(b) is float:
        numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (a, b))
        if not numbers:
            return False
        return a == b or (tolerance > 0 and abs(a - b) <= tolerance * max(1.0, abs(b)))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y, tolerance) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k], tolerance) for k in a)
    return type(a) is type(b) and bool(a == b)


def judge(test: TestCase, outcome: CaseOutcome, tolerance: float) -> str | None:
    """None when the case passed; else why not: wrong answer, timeout, cpu time, crash, memory, output limit."""
    run = outcome.run
    if run.reason == "timeout":
        return "timeout"
    if run.reason in ("cpu", "memory", "output"):
        return {"cpu": "cpu time limit", "memory": "memory limit", "output": "output limit"}[run.reason]
    if test.check == "stdout":
        return _judge_stdout(test, outcome, tolerance)
    verdict = outcome.verdict
    if verdict is None:
        return f"crash: no verdict ({run.detail or _last_line(run.stderr) or 'the case ended without one'})"
    if test.check == "value":
        if "value" not in verdict:
            return _failure(str(verdict.get("error", "no value returned")))
        try:
            value = dec(verdict["value"])
        except (ValueError, TypeError, KeyError):
            return "crash: malformed value"
        return None if same_value(value, test.expected, tolerance) else f"wrong answer: returned {_short(value)}"
    if verdict.get("passed") is True:
        return None
    return _failure(str(verdict.get("error", "failed")))


def _judge_stdout(test: TestCase, outcome: CaseOutcome, tolerance: float) -> str | None:
    run = outcome.run
    if run.reason == "sandbox":
        return f"crash: {run.detail or 'the sandbox failed'}"
    if run.exit_code != 0:
        return f"crash: exit status {run.exit_code}" + (f" ({_last_line(run.stderr)})" if run.stderr else "")
    if same_output(run.stdout, str(test.expected), tolerance):
        return None
    return f"wrong answer: printed {_short(run.stdout)}"


def _failure(error: str) -> str:
    if error.startswith("AssertionError"):
        return "wrong answer" + (f": {error}" if error != "AssertionError: " else "")
    if error.startswith("MemoryError"):
        return "memory limit"
    return f"crash: {error}"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
