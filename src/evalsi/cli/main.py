"""The ``evalsi`` command line.

Exit codes: 0 ok, 1 failed work, 2 bad usage or input, 3 a gate or regression failed.
"""

from __future__ import annotations

import typer

from evalsi import __version__
from evalsi.cli import evaluators, rewards, sandbox, server
from evalsi.cli.compare import compare_command
from evalsi.cli.local_test import local_test_command
from evalsi.cli.run import run_command

app = typer.Typer(
    name="evalsi",
    help="evalsi: evaluators as RL rewards, sandboxed code tests and checkpoint evaluation.\n\n"
    "Exit codes: 0 ok, 1 failed work, 2 bad usage or input, 3 a gate or regression failed.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "EVALSI"},
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(rewards.app, name="rewards")
app.add_typer(evaluators.app, name="evaluators")
app.add_typer(sandbox.app, name="sandbox")
app.add_typer(server.app, name="server")
app.command("run")(run_command)
app.command("compare")(compare_command)
app.command("local-test")(local_test_command)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"evalsi {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """evalsi: evaluators as RL rewards, sandboxed code tests and checkpoint evaluation."""


def main() -> None:
    """Console-script entry point."""
    app()
