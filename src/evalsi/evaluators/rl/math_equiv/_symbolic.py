"""Symbolic comparison, run inside the pool's worker processes (never in the scoring process).

Two backends: math-verify (``parse`` + ``verify``, its own timeouts off: the pool kills overruns) and plain
sympy (a small LaTeX-to-sympy translation with a whitelist of names, then ``simplify`` and a numeric check).
Imports are inside functions so that importing this module, which the scoring process does to name the
functions it sends to workers, never imports sympy there.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from typing import Any

Verdict = tuple[bool, str]
"""Whether the answers are equal, and a short note on how that was decided."""


def compare(backend: str, gold: str, pred: str, float_rounding: int) -> Verdict:
    """Compare two canonical answers with ``backend`` (``math-verify`` or ``sympy``)."""
    if backend == "math-verify":
        return _math_verify(gold, pred, float_rounding)
    return _sympy(gold, pred)


def warm_up() -> None:
    """Import the installed backends and run one comparison of each kind, so workers start warm."""
    if importlib.util.find_spec("math_verify") is not None:
        import math_verify.grader
        import math_verify.parser

        # Our pool bounds every call; math-verify's signal-based timeouts are off, so silence its warning.
        math_verify.grader.TIMEOUT_WARNING_SHOWN = True
        math_verify.parser.TIMEOUT_WARNING_SHOWN = True
        for gold, pred in (
            ("\\frac{1}{2}", "0.5"),
            ("\\{1,2\\}", "\\{2,1\\}"),
            ("(1,2]", "(1,2]"),
            ("x^2-1", "(x-1)(x+1)"),
            ("\\sqrt{8}", "2\\sqrt{2}"),
        ):
            _math_verify(gold, pred, 6)
        _parsed_gold.cache_clear()
    if importlib.util.find_spec("sympy") is not None:
        _sympy("\\sqrt{8}", "2\\sqrt{2}")


@lru_cache(maxsize=4096)
def _parsed_gold(gold: str) -> Any:
    """Each worker parses a reference once; GRPO sends it with every rollout of a prompt."""
    from math_verify import parse

    return _parse_boxed(parse, gold)


def _parse_boxed(parse: Any, answer: str) -> Any:
    parsed = parse("\\boxed{" + answer + "}", parsing_timeout=None)
    return parsed if parsed else parse(answer, parsing_timeout=None)


def _math_verify(gold: str, pred: str, float_rounding: int) -> Verdict:
    from math_verify import parse, verify

    parsed_gold = _parsed_gold(gold)
    parsed_pred = _parse_boxed(parse, pred)
    if not parsed_gold or not parsed_pred:
        return False, "math-verify could not parse " + ("the reference" if not parsed_gold else "the answer")
    same = verify(parsed_gold, parsed_pred, float_rounding=float_rounding, timeout_seconds=None)
    return bool(same), "math-verify"


# --- plain sympy -----------------------------------------------------------------------------------------------

_FUNCTIONS = {
    "sqrt",
    "sin",
    "cos",
    "tan",
    "cot",
    "sec",
    "csc",
    "asin",
    "acos",
    "atan",
    "log",
    "exp",
    "pi",
    "oo",
    "E",
    "I",
    "Abs",
}
_COMMANDS = {
    "\\pi": " pi ",
    "\\infty": " oo ",
    "\\cdot": "*",
    "\\times": "*",
    "\\div": "/",
    "\\ln": " log ",
    "\\log": " log ",
    "\\sin": " sin ",
    "\\cos": " cos ",
    "\\tan": " tan ",
    "\\cot": " cot ",
    "\\sec": " sec ",
    "\\csc": " csc ",
    "\\arcsin": " asin ",
    "\\arccos": " acos ",
    "\\arctan": " atan ",
    "\\exp": " exp ",
}
_INNER_FRAC = re.compile(r"\\frac\{([^{}]*)\}\{([^{}]*)\}")
_INNER_SQRT_N = re.compile(r"\\sqrt\[([^\[\]{}]*)\]\{([^{}]*)\}")
_INNER_SQRT = re.compile(r"\\sqrt\{([^{}]*)\}")
_SAFE = re.compile(r"[0-9A-Za-z+\-*/().\s]*")
_NAME = re.compile(r"[A-Za-z]+")


def latex_to_python(latex: str) -> str | None:
    """A sympy-parsable expression for simple LaTeX, or None (unsupported or unsafe to evaluate)."""
    text = latex
    for command, replacement in _COMMANDS.items():
        text = text.replace(command, replacement)
    for _ in range(64):  # innermost groups first; bounded, the answer's nesting is capped upstream
        new = _INNER_FRAC.sub(r"((\1)/(\2))", text)
        new = _INNER_SQRT_N.sub(r"((\2)**(1/(\1)))", new)
        new = _INNER_SQRT.sub(r"sqrt(\1)", new)
        if new == text:
            break
        text = new
    text = text.replace("^", "**").replace("{", "(").replace("}", ")")
    if "=" in text:
        text = text.rpartition("=")[2]  # an assignment `x = 5`: compare the value
    if "\\" in text or "__" in text or not _SAFE.fullmatch(text):
        return None
    if any(len(name) > 1 and name not in _FUNCTIONS for name in _NAME.findall(text)):
        return None  # multi-letter names could reach sympy's namespace; only whitelisted ones pass
    return text


@lru_cache(maxsize=4096)
def _sympy_expr(latex: str) -> Any:
    import sympy
    from sympy.parsing.sympy_parser import (
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    source = latex_to_python(latex)
    if source is None:
        return None
    names: dict[str, Any] = {name: getattr(sympy, name) for name in _FUNCTIONS}
    names.update({"Integer": sympy.Integer, "Float": sympy.Float, "Rational": sympy.Rational, "Symbol": sympy.Symbol})
    try:
        return parse_expr(
            source, global_dict=names, transformations=(*standard_transformations, implicit_multiplication_application)
        )
    except Exception:
        return None


def _sympy(gold: str, pred: str) -> Verdict:
    import sympy

    parsed_gold, parsed_pred = _sympy_expr(gold), _sympy_expr(pred)
    if parsed_gold is None or parsed_pred is None:
        return False, "sympy could not parse " + ("the reference" if parsed_gold is None else "the answer")
    try:
        difference = sympy.simplify(parsed_gold - parsed_pred)
        if difference == 0:
            return True, "sympy"
        if not difference.free_symbols:
            return abs(complex(sympy.N(difference, 30))) < 1e-9, "sympy (numeric)"
    except Exception as exc:
        return False, f"sympy failed: {type(exc).__name__}"
    return False, "sympy"
