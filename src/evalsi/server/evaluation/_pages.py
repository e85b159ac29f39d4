"""Pages of a project's evaluators, datasets or jobs: newest first, resumed after the last one a page showed.

A page token is the creation time and id of the last resource of the page before it (opaque to callers), so
a page never repeats or skips a resource when others are created or deleted between calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list: its items, newest first, and the token of the page after it (empty at the end)."""

    items: list[T]
    next_page_token: str
