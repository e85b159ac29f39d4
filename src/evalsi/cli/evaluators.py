"""``evalsi evaluators list|describe``: what evaluators exist, their params, defaults and what they read.

``evalsi evaluators upload|get|log|delete`` and ``list --uploaded``: a project's evaluation tests uploaded to an
evalsi server, built there in the sandbox, their state and build log.
"""

from __future__ import annotations

import base64
import inspect
import re
import time
import typing
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from rich.markup import escape
from rich.table import Table

from evalsi.cli import _listing
from evalsi.cli._archive import PackError, pack
from evalsi.cli._console import EXIT_FAILED, fail, stderr, stdout
from evalsi.cli._entries import choose_entry
from evalsi.cli._remote import SERVER_HELP, IdCommands, ServerOption, call, show
from evalsi.errors import UnknownEvaluatorError
from evalsi.evaluators import Evaluator, all_evaluators, evaluator_class, is_operator_only

app = typer.Typer(
    help="List evaluators and describe their params; upload evaluation tests to an evalsi server.",
    no_args_is_help=True,
)
BUILDING = "BUILDING"


@app.command("list")
def list_command(
    uploaded: bool = typer.Option(False, "--uploaded", help="List your project's evaluators on an evalsi server."),
    server: str | None = typer.Option(None, "--server", help=SERVER_HELP + " Implies --uploaded."),
    as_json: _listing.AsJson = False,
    limit: int = typer.Option(100, "--limit", min=0, help="With --uploaded: the newest N (0: all)."),
) -> None:
    """List every evaluator: built-in packs and installed ones; with --uploaded, those uploaded to the server."""
    if uploaded or server is not None:
        items, more = _listing.fetch(server, "/v1alpha1/evaluators", "evaluators", limit, {})
        columns = ("id", "state", "mode", "entry", "archive", "created")
        _listing.show_list(items, more, as_json, "uploaded evaluators", columns, ("archive",), _uploaded_row)
        return
    if as_json:
        found = [
            {"name": c.name, "pack": c.pack, "runsCode": c.runs_code, "summary": c.summary} for c in all_evaluators()
        ]
        stdout.print_json(data=found)
        return
    table = Table(title="evaluators", title_justify="left")
    for column in ("name", "pack", "runs code", "what it checks"):
        table.add_column(column, overflow="fold")
    for cls in all_evaluators():
        table.add_row(escape(cls.name), cls.pack, "yes" if cls.runs_code else "", escape(cls.summary))
    stdout.print(table)


def _uploaded_row(item: dict[str, Any]) -> list[str]:
    return [
        escape(str(item.get("evaluatorId", ""))),
        _listing.state(item.get("state")),
        escape(str(item.get("mode", ""))),
        escape(str(item.get("entry", ""))),
        _listing.size(item.get("archiveBytes")),
        _listing.when(item.get("createTime")),
    ]


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


@app.command("upload")
def upload_command(
    path: Path = typer.Argument(Path("."), exists=True, file_okay=False, help="The project directory to upload."),
    path_option: Path | None = typer.Option(
        None, "--path", exists=True, file_okay=False, help="The project directory, as the argument (default: .)."
    ),
    entry: str | None = typer.Option(
        None,
        "--entry",
        help="The evaluation test: path/to/test_file.py::function. Without it, the project's test files are "
        "searched: the only @evaluation_test is used; several are offered on a terminal, listed otherwise.",
    ),
    evaluator_id: str | None = typer.Option(
        None, "--id", "--evaluator-id", help="The evaluator's id in your project (default: from the test's name)."
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask: use the only evaluation test found."),
    server: ServerOption = None,
    max_bytes: int = typer.Option(16 << 20, "--max-bytes", help="Refuse to upload an archive larger than this."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait until the build ends (exit 1 if it failed)."),
) -> None:
    """Pack PATH (respecting .gitignore; never .git or .venv) and upload it; the server builds it in the sandbox."""
    if path_option is not None:
        if path != Path(".") and path.resolve() != path_option.resolve():
            fail(f"the argument {str(path)!r} and --path {str(path_option)!r} name different directories: give one")
        path = path_option
    if entry is None:
        entry = choose_entry(path, where=str(path), yes=yes)
    location, sep, function = entry.partition("::")
    if not sep or not function or not (path / location).is_file():
        fail(f"--entry {entry!r}: name a test file inside {path} as path/to/test_file.py::function")
    if evaluator_id is None:
        evaluator_id = default_id(function)
        stderr.print(f"evaluator id: {evaluator_id} (--id to choose another)", highlight=False)
    try:
        archive = pack(path, max_bytes)
    except PackError as exc:
        fail(str(exc))
    body = {"evaluatorId": evaluator_id, "entry": entry, "archive": base64.b64encode(archive).decode()}
    evaluator = call(server, "POST", "/v1alpha1/evaluators", body)
    stderr.print(f"uploaded {len(archive)} bytes; building {evaluator_id}", highlight=False)
    while wait and evaluator.get("state") == BUILDING:
        time.sleep(1.0)
        evaluator = call(server, "GET", f"/v1alpha1/evaluators/{evaluator_id}")
    show(evaluator)
    if evaluator.get("state") == "BUILD_FAILED":
        log = call(server, "GET", f"/v1alpha1/evaluators/{evaluator_id}/log").get("log", "")
        stderr.print(escape(log[-4000:]), highlight=False)
        fail(f"the build failed: {evaluator.get('message', '')}", EXIT_FAILED)


def default_id(function: str) -> str:
    """An evaluator id from a test's name: ``test_capital_cities`` -> ``capital-cities`` (at most 63 characters)."""
    name = function.removeprefix("test_").strip("_") or function
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()[:63].rstrip("-") or "evaluator"


by_id = IdCommands(app, "/v1alpha1/evaluators/{id}", id_name="evaluator_id", id_help="The evaluator's id.")

by_id.add("get", "GET", "Show an uploaded evaluator: its state (BUILDING, ACTIVE, BUILD_FAILED), entry and mode.")


@app.command("log")
def log_command(
    evaluator_id: str = typer.Argument(..., help="The evaluator's id."),
    server: ServerOption = None,
) -> None:
    """Print an uploaded evaluator's build log."""
    answer = call(server, "GET", f"/v1alpha1/evaluators/{evaluator_id}/log")
    stdout.print(escape(str(answer.get("log", ""))), highlight=False, soft_wrap=True)


by_id.add(
    "delete", "DELETE", "Delete an uploaded evaluator and its files (refused while a queued or running job uses it)."
)
