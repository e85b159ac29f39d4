"""Tables for terminals and CI logs: a number is never cut short (``0.6…``); names fold onto more lines instead.

Rich shrinks every column of a table wider than the console, ellipsising numbers first; logs and CI consoles
are often 80 columns. Here a column of numbers is as wide as its widest cell and never wraps, text columns fold,
and the frame is light (no outer edge, one space between columns, no padding) so that common tables fit in 80 columns.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from rich import box
from rich.table import Table
from rich.text import Text


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
