"""Text helpers shared by the core evaluators."""

from __future__ import annotations

import re
from typing import Any

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


def references(reference: Any) -> list[str]:
    """A reference as a list of acceptable strings (a list reference accepts any of its items)."""
    if reference is None:
        return []
    if isinstance(reference, list | tuple):
        return [str(r) for r in reference if r is not None]
    return [str(reference)]
