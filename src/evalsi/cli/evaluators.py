"""``evalsi evaluators list|describe``: what evaluators exist, their params, defaults and what they read."""

from __future__ import annotations

import inspect
import re
import typing
from typing import Any

import typer
from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from rich.markup import escape
from rich.table import Table

from evalsi.cli._console import fail, stdout
from evalsi.errors import UnknownEvaluatorError
from evalsi.evaluators import Evaluator, all_evaluators, evaluator_class, is_operator_only

app = typer.Typer(help="List evaluators and describe their params.", no_args_is_help=True)


@app.command("list")
def list_command() -> None:
    """List every evaluator: built-in packs and installed ones."""
    table = Table(title="evaluators", title_justify="left")
    for column in ("name", "pack", "runs code", "what it checks"):
        table.add_column(column, overflow="fold")
    for cls in all_evaluators():
        table.add_row(escape(cls.name), cls.pack, "yes" if cls.runs_code else "", escape(cls.summary))
    stdout.print(table)


@app.command("describe")
def describe_command(
    name: str = typer.Argument(..., help="The evaluator's name, as used in a component's `ref`."),
) -> None:
    """Describe one evaluator: what it checks, what it reads, and each param with its type and default."""
    try:
        cls = evaluator_class(name)
    except UnknownEvaluatorError as exc:
        fail(str(exc))
    stdout.print(f"[bold]{cls.name}[/] ({cls.pack} pack){'  runs code' if cls.runs_code else ''}")
    stdout.print(escape(cls.summary), highlight=False)
    if cls.__doc__:
        stdout.print(f"\n{escape(inspect.cleandoc(cls.__doc__))}", highlight=False)
    stdout.print(f"\n[bold]reads:[/] {', '.join(cls.reads)}")
    stdout.print(_params_table(cls))


def _params_table(cls: type[Evaluator[Any]]) -> Table | str:
    fields = cls.params_model.model_fields
    if not fields:
        return "\n[bold]params:[/] none"
    table = Table(title="params", title_justify="left")
    for column in ("param", "type", "default", "meaning"):
        table.add_column(column, overflow="fold")
    _add_rows(table, cls.params_model, "")
    return table


def _add_rows(table: Table, model: type[BaseModel], prefix: str) -> None:
    """One row per field; a field whose type is a model (a JudgeConfig, say) also lists that model's fields."""
    for field_name, info in model.model_fields.items():
        shown = prefix + (info.alias or field_name)
        default = "(required)" if info.is_required() else _default_text(info.default, info.default_factory)
        meaning = (info.description or "").replace("\n", " ")
        if is_operator_only(model, field_name):
            meaning = "(on a server: the operator's, never a request's) " + meaning
        table.add_row(escape(shown), escape(_type_text(info.annotation)), escape(default), escape(meaning))
        nested = _nested_model(info.annotation)
        if nested is not None and prefix.count(".") < 2:
            _add_rows(table, nested, f"{shown}.")


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside a field's type (``Model``, ``Model | None``, ``str | Model``), if any."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _default_text(default: Any, factory: Any) -> str:
    if default is PydanticUndefined and factory is not None:
        default = factory()
    return repr(default)


def _type_text(annotation: Any) -> str:
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    # `evalsi.evaluators.judge._config.JudgeConfig | None` reads as `JudgeConfig | None`.
    return re.sub(r"\b(?:[a-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", str(annotation))
