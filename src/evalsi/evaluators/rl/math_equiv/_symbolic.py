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


def compare(backend: str, gold: str, pred: str, float_rounding: int, significant_digits: int = 6) -> Verdict:
    """Compare two canonical answers with ``backend`` (``math-verify`` or ``sympy``), item by item.

    Each pair of items is decided, in order, by the pure-Python fast path, then exactly or at random points
    (:func:`decide_exactly`), and only then by the backend's own comparison.
    """
    from evalsi.evaluators.rl.math_equiv._compare import decide
    from evalsi.evaluators.rl.math_equiv._numeric import Tolerance, item_equal

    tol = Tolerance(float_rounding, 0.0, "lenient", significant_digits=significant_digits)
    notes: list[str] = []

    def one(g: str, p: str) -> bool | None:
        fast = item_equal(g, p, tol)
        if fast is not None:
            return fast
        same, note = (_math_verify if backend == "math-verify" else _sympy_item)(
            g, p, float_rounding, significant_digits
        )
        notes.append(note)
        return same

    same, _ = decide(gold, pred, one)
    note = notes[-1] if notes else "numeric"
    return bool(same), note


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
        for gold, pred in (
            ("\\cosh(bx)", "\\frac{e^{bx}+e^{-bx}}{2}"),
            ("\\sinh(x)+\\tan(x)", "\\frac{e^x-e^{-x}}{2}+\\frac{\\sin x}{\\cos x}"),
            ("e^{2\\pi i}", "1"),
            ("\\frac{1}{2}t", "\\frac{t}{2}"),
            ("y=2x+3", "y-2x=3"),
            ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
            ("(-\\infty,\\sqrt{3}]", "(-\\infty,\\sqrt{3}]"),
            ("\\sum_{k=1}^{n}k", "\\frac{n(n+1)}{2}"),
        ):
            compare("math-verify", gold, pred, 6, 6)
        _parsed_gold.cache_clear()
        _latex.cache_clear()
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


@lru_cache(maxsize=8192)
def _latex(answer: str) -> Any:
    """The sympy value of a canonical answer by latex2sympy (math-verify's parser), or None."""
    try:
        from latex2sympy2_extended import latex2sympy

        return latex2sympy(answer)
    except Exception:
        return None


def _math_verify(gold: str, pred: str, float_rounding: int, significant_digits: int = 6) -> Verdict:
    from math_verify import parse, verify

    a, b = _latex(gold), _latex(pred)
    if a is not None and b is not None:
        exact = decide_exactly(a, b, significant_digits)
        if exact is not None:
            return exact
    parsed_gold = _parsed_gold(gold)
    parsed_pred = _parse_boxed(parse, pred)
    if not parsed_gold or not parsed_pred:
        return False, "math-verify could not parse " + ("the reference" if not parsed_gold else "the answer")
    same = verify(parsed_gold, parsed_pred, float_rounding=float_rounding, timeout_seconds=None)
    return bool(same), "math-verify"


_POINTS = ((3, 7), (-5, 11), (13, 17), (2, 9))


def decide_exactly(a: Any, b: Any, significant_digits: int) -> Verdict | None:
    r"""Decide two sympy values without simplification, or None to leave them to the backend.

    Expressions must have the same free symbols (``i`` is the imaginary unit). Numbers: rationals compare
    exactly (``3^{-120}`` is not ``3^{-121}``), a value written with a decimal matches to ``significant_digits``
    digits, anything else (radicals, ``\pi``, ``e^{2\pi i}``) at 40 digits. Expressions with symbols, and
    equations (up to a constant factor), are evaluated at a few fixed rational points: one clear difference
    decides False, agreement everywhere decides True.
    """
    import sympy

    if isinstance(a, sympy.Eq) and isinstance(b, sympy.Eq):
        a, b = a.lhs - a.rhs, b.lhs - b.rhs
        ratio = True
    elif (
        isinstance(a, sympy.Expr)
        and isinstance(b, sympy.Expr)
        and not isinstance(a, sympy.MatrixBase)
        and not isinstance(b, sympy.MatrixBase)
    ):
        ratio = False
    else:
        return None
    a, b = _imaginary_unit(a), _imaginary_unit(b)
    names_a = {s.name for s in a.free_symbols}
    names_b = {s.name for s in b.free_symbols}
    floats = a.has(sympy.Float) or b.has(sympy.Float)
    tolerance = sympy.Rational(5, 10**significant_digits) if floats else sympy.Rational(1, 10**30)
    if not names_a and not names_b and not ratio:
        if not floats and _bounded(a) and _bounded(b):
            x, y = a.doit(), b.doit()
            if x.is_Rational and y.is_Rational:
                return bool(x == y), "exact"
            if x.is_infinite or y.is_infinite:
                return bool(x == y), "exact"
        return _numbers_close(a, b, tolerance, "exact (40 digits)")
    names = sorted(names_a | names_b)
    by_name_a = {s.name: s for s in a.free_symbols}
    by_name_b = {s.name: s for s in b.free_symbols}
    agreed = 0
    ratios: list[Any] = []
    for shift, (num, den) in enumerate(_POINTS):
        values = {name: sympy.Rational(num + k * shift + k, den + k) for k, name in enumerate(names)}
        point = {by_name_a[n]: v for n, v in values.items() if n in by_name_a}
        other = {by_name_b[n]: v for n, v in values.items() if n in by_name_b}
        try:
            x = sympy.N(a.subs(point), 40)
            y = sympy.N(b.subs(other), 40)
        except Exception:
            continue
        if (
            not (x.is_number and y.is_number)
            or x.has(sympy.zoo, sympy.nan, sympy.oo)
            or y.has(sympy.zoo, sympy.nan, sympy.oo)
        ):
            continue
        if ratio:
            if abs(y) < 1e-30:
                if abs(x) < 1e-30:
                    continue
                return False, "different equations (random points)"
            ratios.append(x / y)
            continue
        scale = max(abs(x), abs(y))
        if abs(x - y) > tolerance * scale and abs(x - y) > 1e-30:
            if names_a != names_b:
                return False, f"different variables ({', '.join(sorted(names_a ^ names_b))})"
            return False, "differs at random points"
        agreed += 1
    if ratio and len(ratios) >= 2:
        first = ratios[0]
        same = all(abs(r - first) <= 1e-20 * max(abs(first), 1) for r in ratios) and abs(first) > 1e-30
        return same, "equations compared at random points"
    if agreed >= 3:
        return True, "equal at random points"
    return None


_MAX_EXACT_DIGITS = 20_000
"""Exact evaluation is skipped for values that could have more digits than this (factorials, powers)."""


def _bounded(expr: Any) -> bool:
    """Whether evaluating ``expr`` exactly stays small: no factorial, binomial or power of huge size."""
    import math

    import sympy

    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.factorial | sympy.binomial):
            arg = node.args[0]
            if not arg.is_Integer or int(arg) > 5_000:
                return False
        elif isinstance(node, sympy.Pow) and node.base.is_Integer and node.exp.is_Integer:
            base = abs(int(node.base))
            if base > 1 and abs(int(node.exp)) * math.log10(base) > _MAX_EXACT_DIGITS:
                return False
    return True


def _imaginary_unit(expr: Any) -> Any:
    """``i`` is the imaginary unit in competition answers."""
    import sympy

    found = {s: sympy.I for s in expr.free_symbols if s.name == "i"}
    return expr.subs(found) if found else expr


def _numbers_close(a: Any, b: Any, tolerance: Any, how: str) -> Verdict | None:
    import sympy

    try:
        x, y = sympy.N(a, 40), sympy.N(b, 40)
    except Exception:
        return None
    if not (x.is_number and y.is_number) or x.has(sympy.zoo, sympy.nan) or y.has(sympy.zoo, sympy.nan):
        return None
    if x.is_infinite or y.is_infinite or x.has(sympy.oo, -sympy.oo) or y.has(sympy.oo, -sympy.oo):
        return bool(x == y), how
    scale = max(abs(x), abs(y))
    difference = abs(x - y)
    return bool(difference == 0 or difference <= tolerance * scale), how


def _sympy_item(gold: str, pred: str, float_rounding: int, significant_digits: int = 6) -> Verdict:
    parsed_gold, parsed_pred = _sympy_expr(gold), _sympy_expr(pred)
    if parsed_gold is None or parsed_pred is None:
        return False, "sympy could not parse " + ("the reference" if parsed_gold is None else "the answer")
    exact = decide_exactly(parsed_gold, parsed_pred, significant_digits)
    if exact is not None:
        return exact
    return _sympy(gold, pred)


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
