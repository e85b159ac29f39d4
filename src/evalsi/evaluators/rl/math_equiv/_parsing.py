"""Two-stage LaTeX parsing for the symbolic workers: ANTLR's fast SLL prediction first, full LL only when it fails.

latex2sympy (which math-verify also parses with) runs an ANTLR parser in full LL prediction mode, and on this
grammar most of a comparison's time is spent in that prediction. ANTLR's SLL mode caches its predictions and is
several times cheaper, and ANTLR guarantees that it either returns the parse tree LL mode would have returned or
reports a syntax error (``PredictionMode.SLL``). So a parse is first tried in SLL mode with a listener that bails
out on the first syntax error, and only then, from scratch, exactly as latex2sympy would parse it: the trees, and
so the verdicts, are the ones full LL gives.

One decision is predicted in full LL mode even in the first stage: whether a letter's superscript or subscript
belongs to it (``x^2``: the letter's own superscript, or a power of the letter). That is ambiguous in SLL, which
settles the ambiguity by picking "superscript then subscript" and then fails at the end of every letter raised to
a power that has no subscript (``x^2-1``, ``3x^{2}+12x+10``): most polynomials would be parsed twice, once
failing and once in full LL. ANTLR's LL mode still predicts in SLL first and uses the full context only on an SLL
conflict, so this costs that one decision's full-context prediction, and the other decisions stay SLL.

Numbers are memoised: latex2sympy reads each number with ``sympy.Number(text)``, which for a string runs sympy's
whole expression parser (a ``from sympy import *`` included), a quarter of a millisecond for ``2``. The same text
always gives the same immutable value, so each distinct text is read once per worker.

Only the worker processes install it (:func:`install`); the scoring process never imports latex2sympy.
"""

from __future__ import annotations

from typing import Any


class _SllFailed(Exception):
    """SLL prediction met a syntax error: the input is parsed again in full LL mode."""


_installed = False
_MAX_NUMBERS = 4096
"""Distinct number texts remembered per worker (the memo starts again past this)."""


def installed() -> bool:
    """Whether this process parses in two stages."""
    return _installed


def install() -> bool:
    """Make latex2sympy's parser try SLL first; False when latex2sympy or ANTLR is not installed."""
    global _installed
    if _installed:
        return True
    try:
        from antlr4.atn.PredictionMode import PredictionMode
        from antlr4.error.ErrorListener import ErrorListener
        from latex2sympy2_extended.antlr_parser import PSParser
        from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy
    except ImportError:
        return False

    class _Bail(ErrorListener):  # type: ignore[misc]
        def syntaxError(self, *args: Any) -> None:  # ANTLR's name
            raise _SllFailed

    ll_decisions = frozenset(
        decision
        for decision, state in enumerate(PSParser.atn.decisionToState)
        if state.ruleIndex == PSParser.RULE_atom_expr
    )

    def predict(interpreter: Any, sll_predict: Any) -> Any:
        def adaptive_predict(input: Any, decision: int, outer_context: Any) -> Any:
            if decision not in ll_decisions:
                return sll_predict(input, decision, outer_context)
            interpreter.predictionMode = PredictionMode.LL
            try:
                return sll_predict(input, decision, outer_context)
            finally:
                interpreter.predictionMode = PredictionMode.SLL

        return adaptive_predict

    create_parser = _Latex2Sympy.create_parser
    parse = _Latex2Sympy.parse
    parse_number = _Latex2Sympy.parse_number
    numbers: dict[str, Any] = {}

    def parse_number_once(self: Any, text: str) -> Any:
        number = numbers.get(text)
        if number is None:
            if len(numbers) >= _MAX_NUMBERS:
                numbers.clear()
            number = numbers[text] = parse_number(self, text)
        return number

    def create_sll_parser(self: Any, latex: str) -> Any:
        parser = create_parser(self, latex)
        if getattr(self, "_evalsi_sll", False):
            interpreter = parser._interp
            interpreter.predictionMode = PredictionMode.SLL
            interpreter.adaptivePredict = predict(interpreter, interpreter.adaptivePredict)
            parser.removeErrorListeners()
            parser.addErrorListener(_Bail())
            lexer = parser.getTokenStream().tokenSource
            lexer.removeErrorListeners()
            lexer.addErrorListener(_Bail())
        return parser

    def parse_two_stage(self: Any, latex: str) -> Any:
        self._evalsi_sll = True
        try:
            return parse(self, latex)
        except _SllFailed:  # raised while parsing, before any conversion touched the converter's state
            self._evalsi_sll = False
            return parse(self, latex)
        finally:
            self._evalsi_sll = False

    _Latex2Sympy.create_parser = create_sll_parser
    _Latex2Sympy.parse = parse_two_stage
    _Latex2Sympy.parse_number = parse_number_once
    _installed = True
    return True
