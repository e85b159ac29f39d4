"""Fixtures of the rl evaluators' tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.evaluators.rl._parser_dfa import fresh_dfas


@pytest.fixture
def parser() -> Iterator[Any]:
    """latex2sympy's parser class with empty DFAs, its own restored afterwards."""
    from latex2sympy2_extended.antlr_parser import PSParser

    saved, cache = list(PSParser.decisionsToDFA), PSParser.sharedContextCache.cache
    fresh_dfas(PSParser)
    yield PSParser
    PSParser.decisionsToDFA[:] = saved
    PSParser.sharedContextCache.cache = cache
