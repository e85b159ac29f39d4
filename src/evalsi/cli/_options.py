"""Options several commands share, declared once: the fields of a dataclass, received by each command gathered.

Typer reads a command's options from its signature, so commands that take the same dozen options would each list
them. :func:`gathered` lets a command declare one parameter ``options: SomeOptions`` instead: on the command line
it stands for every field of ``SomeOptions`` (each annotated as a typer option, with its default), and the
command receives them as one ``SomeOptions``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

Command = Callable[..., None]

PARAMETER = "options"
"""The parameter of a command that stands for the gathered options."""


def gathered(options_type: type[Any]) -> Callable[[Command], Command]:
    """A decorator: the command's ``options`` parameter becomes one command-line option per field of ``options_type``.

    The options take the parameter's place in the command's signature (and in its ``--help``).

    Args:
        options_type: A dataclass whose fields are annotated with typer options (``Annotated[str, typer.Option(...)]``)
            and carry their defaults.

    Returns:
        The decorator; the command it wraps must have a parameter named ``options``.

    """
    hints = typing.get_type_hints(options_type, include_extras=True)
    fields = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=_default(f), annotation=hints[f.name])
        for f in dataclasses.fields(options_type)
    ]
    names = [field.name for field in fields]

    def decorate(command: Command) -> Command:
        own = inspect.signature(command, eval_str=True).parameters
        if PARAMETER not in own:
            raise TypeError(f"{command.__name__} has no parameter {PARAMETER!r} for the options of {options_type}")
        parameters: list[inspect.Parameter] = []
        for parameter in own.values():
            if parameter.name == PARAMETER:
                parameters += fields
            else:
                parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY))

        @functools.wraps(command)
        def with_options(**values: Any) -> None:
            options = options_type(**{name: values.pop(name) for name in names})
            command(**values, **{PARAMETER: options})

        with_options.__signature__ = inspect.Signature(parameters, return_annotation=None)  # type: ignore[attr-defined]
        with_options.__annotations__ = {p.name: p.annotation for p in parameters}
        return with_options

    return decorate


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    return inspect.Parameter.empty
