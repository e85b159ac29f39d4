"""Two-stage LaTeX parsing for the symbolic workers: ANTLR's fast SLL prediction first, full LL only when it fails.

latex2sympy (which math-verify also parses with) runs an ANTLR parser in full LL prediction mode, and on this
grammar most of a comparison's time is spent in that prediction. ANTLR's SLL mode caches its predictions and is
several times cheaper, and ANTLR guarantees that it either returns the parse tree LL mode would have returned or
reports a syntax error (``PredictionMode.SLL``). So a parse is first tried in SLL mode with a listener that bails
out on the first syntax error, and only then, from scratch, exactly as latex2sympy would parse it: the trees, and
so the verdicts, are the ones full LL gives.

Only the worker processes install it (:func:`install`); the scoring process never imports latex2sympy.
"""

from __future__ import annotations

from typing import Any


class _SllFailed(Exception):
    """SLL prediction met a syntax error: the input is parsed again in full LL mode."""


_installed = False


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
        from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy
    except ImportError:
        return False

    class _Bail(ErrorListener):  # type: ignore[misc]
        def syntaxError(self, *args: Any) -> None:  # ANTLR's name
            raise _SllFailed

    create_parser = _Latex2Sympy.create_parser
    parse = _Latex2Sympy.parse

    def create_sll_parser(self: Any, latex: str) -> Any:
        parser = create_parser(self, latex)
        if getattr(self, "_evalsi_sll", False):
            parser._interp.predictionMode = PredictionMode.SLL
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
    _installed = True
    return True
