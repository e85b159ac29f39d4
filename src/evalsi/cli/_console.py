"""Consoles shared by the commands: results to stdout, progress, summaries and errors to stderr."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

stdout = Console()
stderr = Console(stderr=True)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_GATE = 3


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print an error on stderr and exit with ``code`` (2: bad usage or input; 1: failed work)."""
    stderr.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)
