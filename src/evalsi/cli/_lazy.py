"""Commands imported when they are invoked (or listed by ``--help``), not when the ``evalsi`` command starts.

Each command's module pulls in what it needs (the reward engine, the server, the trainer integrations, the
viewer...); importing all of them cost ``evalsi run`` a quarter of a second of start-up before its first request.
The top-level group knows its commands by name and module, and loads one the first time it is asked for it.
"""

from __future__ import annotations

import gc
import importlib
from typing import ClassVar

import typer
import typer.main
from typer import _click  # the Click that Typer runs on (vendored in Typer)
from typer.core import TyperGroup


class LazyGroup(TyperGroup):
    """A Typer group whose commands are ``name: (module, attribute)`` pairs, imported on first use.

    The attribute is a ``typer.Typer`` (a group of commands) or a command function. Commands keep the order of
    :attr:`commands_by_name` in ``--help``.
    """

    commands_by_name: ClassVar[dict[str, tuple[str, str]]] = {}

    def list_commands(self, ctx: _click.Context) -> list[str]:
        """Every command's name, loaded or not."""
        names = super().list_commands(ctx)
        return [*names, *(name for name in self.commands_by_name if name not in names)]

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        """The command called ``cmd_name``, importing its module the first time; None when there is none."""
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self.commands_by_name:
            command = self.commands[cmd_name] = load_command(cmd_name, *self.commands_by_name[cmd_name])
        return command

    def resolve_command(
        self, ctx: _click.Context, args: list[str]
    ) -> tuple[str | None, _click.Command | None, list[str]]:
        """As Typer's, loading every command first when the name is unknown, so "did you mean" sees them all."""
        if args and args[0] not in self.commands and args[0] not in self.commands_by_name:
            for name in self.list_commands(ctx):
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)


def load_command(name: str, module: str, attribute: str) -> _click.Command:
    """The Click command ``name`` made of ``module.attribute`` (a Typer app or a command function)."""
    target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer):
        command: _click.Command = typer.main.get_group(target)
    else:
        single = typer.Typer(add_completion=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    resume_collection()
    return command


def resume_collection() -> None:
    """Turn the garbage collector back on if :func:`evalsi.cli.main.main` turned it off for start-up.

    What start-up built (modules, classes, functions) is frozen first: the collector's full scans, which a run's
    records and requests trigger, then skip it. Called by a program that imports the CLI without ``main``, it does
    nothing.
    """
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
