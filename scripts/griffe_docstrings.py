"""A griffe extension for the manual's API reference: evalsi's docstrings read as mkdocstrings renders them.

Two habits of the docstrings come from Sphinx, and are rewritten before a docstring is parsed:

- Google style names the examples section ``Example:`` or ``Examples:`` (Sphinx's napoleon reads both), and the
  docstrings use the first. griffe parses only ``Examples:`` as doctests and renders ``Example:`` as a note of
  Markdown text, where a doctest line such as ``[r.step for r in results]`` reads as a link. The header is
  renamed, so every example renders as Python code.
- Cross-references are Sphinx roles (``:class:`~evalsi.rewards.Reward```), which Markdown shows as stray
  colons. Each becomes the code span Sphinx would display: the last name with ``~``, else the whole target.

mkdocs.yml loads this file.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^([ \t]*)Example:[ \t]*$", re.MULTILINE)
_ROLE = re.compile(r":(?:py:)?(?:class|func|mod|meth|attr|data|exc|obj|const):`(~?)([^`]+)`")


def _role(match: re.Match[str]) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def rewrite(text: str) -> str:
    r"""``text`` (a docstring) with its ``Example:`` header renamed and its Sphinx roles made code spans.

    Args:
        text: The docstring as written.

    Returns:
        The docstring mkdocstrings renders.

    Example:
        >>> rewrite("Uses :class:`~evalsi.rewards.Reward` and :func:`evalsi.rewards.load`.\n\nExample:\n    >>> 1")
        'Uses `Reward` and `evalsi.rewards.load`.\n\nExamples:\n    >>> 1'

    """
    return _ROLE.sub(_role, _EXAMPLE.sub(r"\1Examples:", text))


class EvalsiDocstrings(griffe.Extension):
    """Rewrites each object's docstring (see :func:`rewrite`) as the object is loaded, before it is parsed."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite ``obj``'s docstring in place."""
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
