"""Tables for terminals and CI logs: a number is never cut short (``0.6…``); names fold onto more lines instead.

Rich shrinks every column of a table wider than the console, ellipsising numbers first; logs and CI consoles
are often 80 columns. Here a column of numbers is as wide as its widest cell and never wraps, text columns fold,
and the frame is light (no outer edge, one space between columns, no padding) so that common tables fit in 80 columns.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from rich import box
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from evalsi.stats import describe_method


def number_table(
    title: str,
    columns: Sequence[str],
    numeric: Collection[str],
    rows: Iterable[Sequence[str]],
    caption: str | None = None,
) -> Table:
    """A table whose ``numeric`` columns keep every cell whole (right-aligned); other columns fold.

    Cells are rich markup strings, as for ``Table.add_row``.
    """
    body = [list(row) for row in rows]
    table = Table(
        title=title,
        title_justify="left",
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 0),
    )
    for index, name in enumerate(columns):
        if name in numeric:
            widest = max([Text.from_markup(row[index]).cell_len for row in body] + [len(name)])
            table.add_column(name, justify="right", no_wrap=True, min_width=widest)
        else:
            table.add_column(name, overflow="fold")
    for row in body:
        table.add_row(*row)
    return table


def interval_note(methods: Iterable[tuple[str, str]]) -> str | None:
    """Which method gave each 95% interval, from ``(name, method)`` pairs (None when none has an interval).

    One method: ``95% CI: Wilson score interval``; several: each with the names it applies to.
    """
    by_method: dict[str, list[str]] = {}
    for name, method in methods:
        names = by_method.setdefault(method, []) if method else None
        if names is not None and name not in names:
            names.append(name)
    if not by_method:
        return None
    if len(by_method) == 1:
        return f"95% CI: {describe_method(next(iter(by_method)))}"
    parts = [f"{describe_method(method)} ({escape(', '.join(names))})" for method, names in by_method.items()]
    return "95% CI: " + "; ".join(parts)
