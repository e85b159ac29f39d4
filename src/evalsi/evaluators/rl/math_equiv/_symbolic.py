"""Symbolic comparison, run inside the pool's worker processes (never in the scoring process).

Two backends: math-verify (``parse`` + ``verify``, its own timeouts off: the pool kills overruns) and plain
sympy (a small LaTeX-to-sympy translation with a whitelist of names, then ``simplify`` and a numeric check).
Imports are inside functions so that importing this module, which the scoring process does to name the
functions it sends to workers, never imports sympy there.
"""

from __future__ import annotations

import gc
import importlib.util
import re
from functools import lru_cache
from typing import Any

from evalsi.evaluators.rl.math_equiv._compare import equals_signs

Verdict = tuple[bool, str]
"""Whether the answers are equal, and a short note on how that was decided."""


def compare(backend: str, gold: str, pred: str, float_rounding: int, significant_digits: int = 6) -> Verdict:
    """Compare two canonical answers with ``backend`` (``math-verify`` or ``sympy``), item by item.

    Each pair of items is decided, in order, by the pure-Python fast path, then exactly or at random points
    (:func:`decide_exactly`), and only then by the backend's own comparison. The note says which of them decided
    (for several items, the shape and each way its items were decided).
    """
    from evalsi.evaluators.rl.math_equiv._compare import decide
    from evalsi.evaluators.rl.math_equiv._numeric import Tolerance, item_verdict

    tol = Tolerance(float_rounding, 0.0, "lenient", significant_digits=significant_digits)
    backend_item = _math_verify if backend == "math-verify" else _sympy_item

    def one(g: str, p: str) -> tuple[bool | None, str]:
        fast = item_verdict(g, p, tol)
        if fast[0] is not None:
            return fast
        return backend_item(g, p, float_rounding, significant_digits)

    same, how = decide(gold, pred, one)
    return bool(same), how


def warm_up() -> None:
    """Import the installed backends and run one comparison of each kind, so workers start warm.

    LaTeX is parsed in two stages from here on (:mod:`._parsing`): the same trees, at a fraction of the cost; the
    parser's prediction cache saved by earlier workers is loaded first (:mod:`._prediction_cache`).

    Only run in a process of its own (the pool's template, or a worker started without one): the objects alive
    once the cache is loaded (hundreds of thousands, the DFA's, kept for the life of the process) are moved out of
    the garbage collector's reach, so the collections the imports and comparisons set off, here and in the
    workers forked from here, no longer walk them (about 0.1 s of the template's start).
    """
    from evalsi.evaluators.rl.math_equiv import _prediction_cache
    from evalsi.evaluators.rl.math_equiv._parsing import install

    install()
    _prediction_cache.load()
    gc.freeze()
    if importlib.util.find_spec("math_verify") is not None:
        import math_verify.grader
        import math_verify.parser

        # Our pool bounds every call; math-verify's signal-based timeouts are off, so silence its warning.
        math_verify.grader.TIMEOUT_WARNING_SHOWN = True
        math_verify.parser.TIMEOUT_WARNING_SHOWN = True
        warm_math_verify()
        _parsed_gold.cache_clear()
        _latex.cache_clear()
    if importlib.util.find_spec("sympy") is not None:
        import sympy.physics.units  # noqa: F401  # simplify() imports it on its first call: once here, not per worker

        _sympy("\\sqrt{8}", "2\\sqrt{2}")


WARM_BACKEND = (
    ("\\frac{1}{2}", "0.5"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("(1,2]", "(1,2]"),
    ("x^2-1", "(x-1)(x+1)"),
    ("\\sqrt{8}", "2\\sqrt{2}"),
)
"""Pairs the template compares with math-verify alone, to warm it up."""
WARM_COMPARE = (
    ("\\cosh(bx)", "\\frac{e^{bx}+e^{-bx}}{2}"),
    ("\\sinh(x)+\\tan(x)", "\\frac{e^x-e^{-x}}{2}+\\frac{\\sin x}{\\cos x}"),
    ("e^{2\\pi i}", "1"),
    ("\\frac{1}{2}t", "\\frac{t}{2}"),
    ("y=2x+3", "y-2x=3"),
    ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
    ("(-\\infty,\\sqrt{3}]", "(-\\infty,\\sqrt{3}]"),
    ("\\sum_{k=1}^{n}k", "\\frac{n(n+1)}{2}"),
    ("F_n=\\sum_{k=0}^{n-1}F_kF_{n-k-1}", "F_n=\\sum_{k=0}^{n-1}F_{n-k-1}F_k"),
    ("f(x)=x^2", "g(x)=x^2"),
)
"""Pairs the template compares the way workers do (every stage), to warm up each of them."""


def warm_math_verify() -> None:
    """Run the warm-up comparisons of math-verify (the shipped prediction cache is built to hold their parses)."""
    for gold, pred in WARM_BACKEND:
        _math_verify(gold, pred, 6)
    for gold, pred in WARM_COMPARE:
        compare("math-verify", gold, pred, 6, 6)


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
    if same:
        refuted = refutation(parsed_gold[0], parsed_pred[0], significant_digits)
        if refuted is not None:
            return False, f"{refuted}; math-verify's equal overruled"
    return bool(same), "math-verify"


def refutation(a: Any, b: Any, significant_digits: int) -> str | None:
    """Why two values a backend called equal differ at random points, or None when no evaluation shows it.

    Only values with free symbols or bound indices (sums, products, integrals) are checked: those are what a
    backend's simplification or its lenient parsing can call equal wrongly, and what evaluation can refute.
    """
    import sympy

    if not all(isinstance(v, sympy.Basic) for v in (a, b)):
        return None
    if not any(v.free_symbols or v.has(sympy.Sum, sympy.Product, sympy.Integral) for v in (a, b)):
        return None
    verdict = decide_exactly(a, b, significant_digits)
    return verdict[1] if verdict is not None and verdict[0] is False else None


_POINTS = ((3, 7), (-5, 11), (13, 17), (2, 9))
_INTEGER_POINTS = (5, 7, 4, 9)
"""Where symbols are evaluated when a sum or product has them in its limits (integers, so the limits are)."""
_SUBSCRIPT = re.compile(r"(?P<base>[A-Za-z]+)_(?:\{(?P<braced>[^{}]+)\}|(?P<bare>[A-Za-z0-9]))")
_INDEX = re.compile(r"[A-Za-z0-9+\-* ]+")


def decide_exactly(a: Any, b: Any, significant_digits: int) -> Verdict | None:
    r"""Decide two sympy values without simplification, or None to leave them to the backend.

    Expressions must have the same free symbols (``i`` is the imaginary unit): different ones are different
    answers unless evaluation shows them equal. Numbers: rationals compare exactly (``3^{-120}`` is not
    ``3^{-121}``), a value written with a decimal matches to ``significant_digits`` digits, anything else
    (radicals, ``\pi``, ``e^{2\pi i}``) at 40 digits. Expressions with symbols, and equations (up to a constant
    factor), are evaluated at a few fixed points: one clear difference decides False, agreement everywhere
    decides True. Sums and products are evaluated at integer points, with an indexed name (``F_{n-k-1}``) read
    as a function of its index; an undefined function (``f(x)``) is replaced by a fixed function of its own, so
    ``f`` and ``g`` differ while ``f(n-1)+f(n-2)`` and ``f(n-2)+f(n-1)`` agree.
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
    if a.has(sympy.Sum, sympy.Product) or b.has(sympy.Sum, sympy.Product):
        a, b = _indexed_names(a), _indexed_names(b)
    indexed = _symbolic_limits(a) or _symbolic_limits(b)
    names_a = {s.name for s in a.free_symbols}
    names_b = {s.name for s in b.free_symbols}
    floats = a.has(sympy.Float) or b.has(sympy.Float)
    tolerance = sympy.Rational(5, 10**significant_digits) if floats else sympy.Rational(1, 10**30)
    if not names_a and not names_b and not ratio and not _has_undefined(a) and not _has_undefined(b):
        if not floats and _bounded(a) and _bounded(b):
            x, y = a.doit(), b.doit()
            if x.is_Rational and y.is_Rational:
                return bool(x == y), "exact"
            if x.is_infinite or y.is_infinite:
                return bool(x == y), "exact"
        return _numbers_close(a, b, tolerance, "exact (40 digits)")
    a, b = _concrete_functions(a), _concrete_functions(b)
    names = sorted(names_a | names_b)
    by_name_a = {s.name: s for s in a.free_symbols}
    by_name_b = {s.name: s for s in b.free_symbols}
    different = f"different variables ({', '.join(sorted(names_a ^ names_b))})"
    agreed = 0
    ratios: list[Any] = []
    for shift, (num, den) in enumerate(_POINTS):
        if indexed:
            values = {name: sympy.Integer(_INTEGER_POINTS[shift] + k) for k, name in enumerate(names)}
        else:
            values = {name: sympy.Rational(num + k * shift + k, den + k) for k, name in enumerate(names)}
        point = {by_name_a[n]: v for n, v in values.items() if n in by_name_a}
        other = {by_name_b[n]: v for n, v in values.items() if n in by_name_b}
        try:
            x = sympy.N(_unrolled(a.subs(point)) if indexed else a.subs(point), 40)
            y = sympy.N(_unrolled(b.subs(other)) if indexed else b.subs(other), 40)
        except Exception:
            continue
        if (
            not (x.is_number and y.is_number)
            or x.has(sympy.zoo, sympy.nan, sympy.oo)
            or y.has(sympy.zoo, sympy.nan, sympy.oo)
        ):
            continue
        if ratio:
            try:
                zeros = bool(abs(x) < 1e-30), bool(abs(y) < 1e-30)
            except TypeError:
                continue
            if zeros[1]:
                if zeros[0]:
                    continue
                return False, different if names_a != names_b else "different equations (random points)"
            ratios.append(x / y)
            continue
        try:
            differs = bool(abs(x - y) > tolerance * max(abs(x), abs(y)) and abs(x - y) > 1e-30)
        except TypeError:  # a value sympy could not evaluate to a number
            continue
        if differs:
            return False, different if names_a != names_b else "differs at random points"
        agreed += 1
    if ratio and len(ratios) >= 2:
        first = ratios[0]
        same = all(abs(r - first) <= 1e-20 * max(abs(first), 1) for r in ratios) and abs(first) > 1e-30
        if not same:
            return False, different if names_a != names_b else "different equations (random points)"
        return True, "equations compared at random points"
    if agreed >= 3:
        return True, "equal at random points"
    if names_a != names_b:
        return False, different  # when evaluation cannot show them equal, different variables are not
    return None


def _indexed_names(expr: Any) -> Any:
    """``F_{n-k-1}``, ``a_k`` read as functions of their index (``F(n-k-1)``), so a sum's bound index reaches them.

    A subscript without letters (``x_1``) stays part of the name.
    """
    import sympy

    swaps: dict[Any, Any] = {}
    by_name = {s.name: s for s in expr.atoms(sympy.Symbol)}
    for symbol in expr.free_symbols:
        match = _SUBSCRIPT.fullmatch(symbol.name)
        if match is None:
            continue
        index = match.group("braced") or match.group("bare")
        if not re.search(r"[A-Za-z]", index) or not _INDEX.fullmatch(index):
            continue
        try:
            value = sympy.sympify(
                index.replace(" ", ""),
                locals={name: by_name.get(name, sympy.Symbol(name)) for name in re.findall(r"[A-Za-z]+", index)},
            )
        except (sympy.SympifyError, TypeError, SyntaxError):
            continue
        swaps[symbol] = sympy.Function(match.group("base"))(value)
    return expr.xreplace(swaps) if swaps else expr


def _symbolic_limits(expr: Any) -> bool:
    r"""Whether a sum or product in ``expr`` runs to a symbol (``\sum_{k=0}^{n-1}``): it is evaluated at integers."""
    import sympy

    return any(
        any(bound.free_symbols for limit in term.limits for bound in limit[1:])
        for term in expr.atoms(sympy.Sum, sympy.Product)
    )


def _has_undefined(expr: Any) -> bool:
    from sympy.core.function import AppliedUndef

    return bool(expr.atoms(AppliedUndef))


def _concrete_functions(expr: Any) -> Any:
    """Each undefined function replaced by a fixed function of its own name, so evaluation has a value."""
    import sympy
    from sympy.core.function import AppliedUndef

    applied = expr.atoms(AppliedUndef)
    if not applied:
        return expr
    swaps = {}
    for call in applied:
        seed = sum(ord(c) * (i + 1) for i, c in enumerate(call.func.__name__)) % 17 + 2
        value = sympy.Integer(0)
        for position, arg in enumerate(call.args):
            k = seed + 3 * position
            value += (arg**2 + k) / (arg**2 + arg + k + 1) + arg / k  # rational: exact and fast to evaluate
        swaps[call] = value
    return expr.xreplace(swaps)


_MAX_TERMS = 256
"""A sum or product evaluated at a point is written out term by term up to this many terms."""


def _unrolled(expr: Any) -> Any:
    """``expr`` with every sum and product over integer limits written out term by term (no summation algorithm).

    Inner sums whose limits depend on an outer index are written out once the outer one is. Raises
    ``ValueError`` when one has more than ``_MAX_TERMS`` terms.
    """
    import sympy

    def unroll(node: Any) -> Any:
        var, low, high = node.limits[-1]  # Sum(f, (j, 1, i), (i, 1, n)): the last limit is the outermost
        body = node.func(node.function, *node.limits[:-1]) if len(node.limits) > 1 else node.function
        if not (low.is_Integer and high.is_Integer):
            return node
        start, stop = int(low), int(high)
        inverse = stop < start - 1  # Karr's convention, as sympy's: sum_{a}^{b} = -sum_{b+1}^{a-1}
        if inverse:
            start, stop = stop + 1, start - 1
        if stop - start + 1 > _MAX_TERMS:
            raise ValueError("too many terms to write out")
        terms = [body.xreplace({var: sympy.Integer(i)}) for i in range(start, stop + 1)]
        if isinstance(node, sympy.Sum):
            return -sympy.Add(*terms) if inverse else sympy.Add(*terms)
        return 1 / sympy.Mul(*terms) if inverse else sympy.Mul(*terms)

    for _ in range(8):
        found = expr.atoms(sympy.Sum, sympy.Product)
        if not found:
            break
        expr = expr.replace(lambda e: isinstance(e, sympy.Sum | sympy.Product), unroll)
    return expr


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
    signs = equals_signs(text)
    if signs:
        text = text[signs[-1] + 1 :]  # an assignment `x = 5`: compare the value
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
