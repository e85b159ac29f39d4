"""A griffe extension for the manual's API reference: a docstring's ``Example:`` section is an examples section.

Google style names that section ``Example:`` or ``Examples:`` (Sphinx's napoleon reads both), and evalsi's
docstrings use the first. griffe parses only ``Examples:`` as doctest examples and renders ``Example:`` as a note
of Markdown text, where a doctest line such as ``[r.step for r in results]`` reads as a link. Renaming the header
before the docstring is parsed renders every example as Python code. mkdocs.yml loads this file.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^([ \t]*)Example:[ \t]*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Reads a docstring's ``Example:`` section as ``Examples:``, the section griffe parses as doctests."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rename the header in ``obj``'s docstring as the object is loaded, before its docstring is parsed."""
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
