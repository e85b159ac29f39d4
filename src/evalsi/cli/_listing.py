"""Listing a server's evaluators, datasets or jobs: every page up to a limit, as a table or as JSON for scripts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any
from urllib.parse import urlencode

import orjson
import typer
from rich.markup import escape

from evalsi.cli._console import stderr, stdout
from evalsi.cli._remote import call
from evalsi.cli._tables import number_table

PAGE = 100
STATE_STYLES = {"ACTIVE": "green", "COMPLETED": "green", "FAILED": "red", "BUILD_FAILED": "red", "CANCELLED": "dim"}

Row = Callable[[dict[str, Any]], Sequence[str]]

AsJson = Annotated[bool, typer.Option("--json", help="Print a JSON array (for scripts).")]
"""``--json`` of a list command."""
Limit = Annotated[int, typer.Option("--limit", min=0, help="The newest N (0: all).")]
"""``--limit`` of a list command (default 100)."""


def fetch(server: str | None, path: str, key: str, limit: int, query: dict[str, str]) -> tuple[list[Any], bool]:
    """Up to ``limit`` items (0: all) of a listing, newest first, and whether more remain."""
    items: list[Any] = []
    token = ""
    while True:
        size = PAGE if limit == 0 else min(PAGE, limit - len(items))
        params = {**query, "pageSize": str(size), **({"pageToken": token} if token else {})}
        answer = call(server, "GET", f"{path}?{urlencode(params)}")
        items += answer.get(key) or []
        token = str(answer.get("nextPageToken") or "")
        if not token:
            return items, False
        if limit and len(items) >= limit:
            return items, True


def show_list(
    items: list[dict[str, Any]],
    more: bool,
    as_json: bool,
    title: str,
    columns: Sequence[str],
    numeric: Sequence[str],
    row: Row,
) -> None:
    """Print ``items`` as a JSON array (``as_json``) or as a table; say on stderr when the limit cut it short."""
    if as_json:
        stdout.print_json(orjson.dumps(items).decode())
    else:
        caption = None if items else f"no {title}"
        stdout.print(number_table(title, columns, numeric, (row(item) for item in items), caption))
    if more:
        stderr.print(f"showing the newest {len(items)} {title}; --limit 0 lists them all", highlight=False)


def state(value: Any) -> str:
    """A state, coloured by how it ended."""
    text = escape(str(value or ""))
    style = STATE_STYLES.get(str(value))
    return f"[{style}]{text}[/]" if style else text


def when(value: Any) -> str:
    """An RFC 3339 time as ``2026-01-31 12:00:05``."""
    return escape(str(value or "").replace("T", " ")[:19])


def size(value: Any) -> str:
    """A byte count, readable (``1.5 MiB``)."""
    amount = float(value or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024 or unit == "GiB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return ""  # unreachable: the loop returns at GiB
