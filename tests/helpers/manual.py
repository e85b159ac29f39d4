"""The manual: the README and the site's pages under docs/, whose examples the tests load, run and check.

The README is the front page and the pages under docs/ the rest; an example moved from one to the other stays
tested, since every test reads them together.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"


def pages() -> list[Path]:
    """The README, then every page of the site in path order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def text() -> str:
    """Every page's text, joined."""
    return "\n".join(page.read_text(encoding="utf-8") for page in pages())


def blocks(language: str) -> list[str]:
    """The fenced code blocks tagged ``language``, from every page in order."""
    return re.findall(rf"```{language}\n(.*?)```", text(), re.S)
