"""``evalsi sandbox doctor``: which isolation rungs work on this machine, and why the others do not."""

from __future__ import annotations

import typer
from rich.table import Table

from evalsi.cli._console import EXIT_FAILED, fail, stdout
from evalsi.sandbox import best_available, doctor, memory_bound

app = typer.Typer(help="Inspect the sandbox that code-running evaluators use.", no_args_is_help=True)


@app.callback()
def _sandbox() -> None:
    """Inspect the sandbox that code-running evaluators use."""


@app.command("doctor")
def doctor_command(
    require: str = typer.Option(
        None, "--require", help="Exit 1 unless this rung (process, namespaced, gvisor) or a higher one works."
    ),
) -> None:
    """Print each rung (process < namespaced < gvisor): whether it works here, and what is missing if not.

    Then the memory bound in force: a cgroup per sandbox (v2 or v1), or per-process rlimits dividing the budget.

    Exit codes: 0 ok; 1 the rung named by --require (or any rung, without it) is not available.
    """
    table = Table(title="sandbox rungs (lowest to highest isolation)", title_justify="left")
    for column in ("rung", "works", "detail", "how to fix"):
        table.add_column(column, overflow="fold")
    found = doctor()
    for item in found:
        mark = "[green]yes[/]" if item.ok else "[red]no[/]"
        table.add_row(item.rung, mark, item.detail, item.fix)
    stdout.print(table)
    best = best_available()
    stdout.print(f"best available rung: [bold]{best or 'none'}[/]")
    stdout.print(f"memory bound: {memory_bound()}", soft_wrap=True)
    if require is not None:
        names = [f.rung for f in found]
        if require not in names:
            fail(f"--require must be one of {', '.join(names)}, got {require!r}")
        if not any(f.ok for f in found[names.index(require) :]):
            fail(f"--require {require}: neither it nor a higher rung works here (see the table)", EXIT_FAILED)
    elif best is None:
        fail("no sandbox rung works here (see the table)", EXIT_FAILED)
