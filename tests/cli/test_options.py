"""Options shared by several commands: declared once as a dataclass, received by each command gathered."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from evalsi.cli._options import gathered

Name = Annotated[str, typer.Option("--name", help="Who to greet.")]
Times = Annotated[int, typer.Option("--times", min=1, help="How many greetings.")]
Loud = Annotated[bool, typer.Option("--loud", help="Shout.")]


@dataclass(frozen=True)
class Greeting:
    name: Name
    times: Times = 1
    loud: Loud = False


app = typer.Typer()
heard: list[tuple[str, Greeting, bool]] = []


@app.command("hello")
@gathered(Greeting)
def hello(
    where: Annotated[str, typer.Argument(help="Where.")],
    options: Greeting,
    twice: Annotated[bool, typer.Option("--twice", help="Again.")] = False,
) -> None:
    """Say hello."""
    heard.append((where, options, twice))


@app.command("bye")
@gathered(Greeting)
def bye(options: Greeting) -> None:
    """Say goodbye."""
    heard.append(("", options, False))


def test_a_command_receives_the_shared_options_gathered_with_their_defaults() -> None:
    heard.clear()
    runner = CliRunner()
    assert runner.invoke(app, ["hello", "home", "--name", "Ada", "--twice"]).exit_code == 0
    assert runner.invoke(app, ["bye", "--name", "Bob", "--times", "3", "--loud"]).exit_code == 0
    assert heard == [("home", Greeting("Ada"), True), ("", Greeting("Bob", 3, True), False)]


def test_the_shared_options_are_checked_and_required_as_declared() -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["bye"])
    assert missing.exit_code == 2 and "--name" in missing.output
    low = runner.invoke(app, ["bye", "--name", "Ada", "--times", "0"])
    assert low.exit_code == 2 and "--times" in low.output


def test_the_options_stand_where_the_parameter_does_in_the_help() -> None:
    result = CliRunner().invoke(app, ["hello", "--help"], env={"COLUMNS": "120"})
    order = [m for m in re.findall(r"--[a-z]+", result.output) if m != "--help"]
    assert order == ["--name", "--times", "--loud", "--twice"], result.output


def test_a_command_without_the_parameter_is_refused() -> None:
    def nothing(where: str) -> None:
        """No options parameter."""

    with pytest.raises(TypeError, match="has no parameter 'options'"):
        gathered(Greeting)(nothing)
