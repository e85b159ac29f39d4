"""``evalsi datasets create|get|list|delete``: datasets stored on an evalsi server, for evaluation jobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from evalsi.cli import _listing
from evalsi.cli._console import fail, stderr
from evalsi.cli._remote import IdCommands, ServerOption, call, show

app = typer.Typer(help="Create, show, list and delete datasets on an evalsi server.", no_args_is_help=True)


@app.command("create")
def create_command(
    name: str = typer.Argument(..., help="The dataset's id in your project."),
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="JSONL: rows with messages, ground_truth."),
    server: ServerOption = None,
) -> None:
    """Upload FILE as dataset NAME; the server checks every row and names the line of a bad one."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{file}: {exc}")
    show(call(server, "POST", "/v1alpha1/datasets", {"datasetId": name, "jsonl": text}))


@app.command("get")
def get_command(
    name: str = typer.Argument(..., help="The dataset's id."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the rows (JSONL) to this file."),
    server: ServerOption = None,
) -> None:
    """Show a dataset (rows, size, the job that wrote it); with --output, save its rows."""
    path = f"/v1alpha1/datasets/{name}" + ("?rows=true" if output else "")
    answer = call(server, "GET", path)
    if output is not None:
        output.write_text(str(answer.pop("jsonl", "")), encoding="utf-8")
        stderr.print(f"wrote {answer.get('rowCount', 0)} rows to {output}", highlight=False)
    show(answer)


@app.command("list")
def list_command(
    as_json: _listing.AsJson = False,
    limit: _listing.Limit = 100,
    server: ServerOption = None,
) -> None:
    """List your project's datasets, newest first: rows, size and the job that wrote each."""
    items, more = _listing.fetch(server, "/v1alpha1/datasets", "datasets", limit, {})
    columns = ("id", "rows", "size", "written by", "created")
    _listing.show_list(items, more, as_json, "datasets", columns, ("rows", "size"), _row)


def _row(item: dict[str, Any]) -> list[str]:
    return [
        escape(str(item.get("datasetId", ""))),
        str(item.get("rowCount", 0)),
        _listing.size(item.get("sizeBytes")),
        escape(str(item.get("sourceJob") or "")),
        _listing.when(item.get("createTime")),
    ]


by_id = IdCommands(app, "/v1alpha1/datasets/{id}", id_name="name", id_help="The dataset's id.")

by_id.add("delete", "DELETE", "Delete a dataset.")
