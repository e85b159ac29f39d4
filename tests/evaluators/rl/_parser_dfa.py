"""latex2sympy's ANTLR parser with empty DFAs, and its parse trees: for the prediction cache's tests."""

from __future__ import annotations

from typing import Any


def fresh_dfas(parser: Any) -> None:
    """Give the parser class empty DFAs and an empty context cache, as in a new process."""
    from antlr4.dfa.DFA import DFA
    from antlr4.PredictionContext import PredictionContextCache

    parser.decisionsToDFA[:] = [DFA(state, i) for i, state in enumerate(parser.atn.decisionToState)]
    parser.sharedContextCache.cache = PredictionContextCache().cache


def trees(parser: Any, texts: list[str]) -> list[str]:
    """Each text's parse tree (or the error it raised), parsed as latex2sympy's ``math`` rule."""
    from antlr4 import CommonTokenStream, InputStream
    from latex2sympy2_extended.antlr_parser import PSLexer

    out = []
    for text in texts:
        instance = parser(CommonTokenStream(PSLexer(InputStream(text))))
        instance.removeErrorListeners()
        try:
            out.append(instance.math().toStringTree(recog=instance))
        except Exception as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    return out
