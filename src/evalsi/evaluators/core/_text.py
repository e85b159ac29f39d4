"""Text helpers shared by the core evaluators."""

from __future__ import annotations

import re

_WHITESPACE = re.compile(r"\s+")


def normalise(text: str, *, ignore_case: bool, strip: bool, collapse_whitespace: bool) -> str:
    """Apply the comparison options the core evaluators share."""
    if strip:
        text = text.strip()
    if collapse_whitespace:
        text = _WHITESPACE.sub(" ", text)
    if ignore_case:
        text = text.casefold()
    return text
