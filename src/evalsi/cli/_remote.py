"""Talking to an evalsi server's HTTP JSON API from the command line: where it is, the token, errors.

The server is ``--server`` or else ``EVALSI_SERVER`` (default ``http://127.0.0.1:8080``); the token is
``EVALSI_TOKEN``. An answer the server refused exits 2 with its message; an unreachable server or a server error
exits 1.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn

import httpx
import orjson
import typer

from evalsi.cli._console import EXIT_BAD_INPUT, EXIT_FAILED, fail, stdout

DEFAULT_SERVER = "http://127.0.0.1:8080"
SERVER_HELP = "The evalsi server's HTTP address (default: EVALSI_SERVER, else http://127.0.0.1:8080)."
ServerOption = Annotated[str | None, typer.Option("--server", help=SERVER_HELP)]
"""``--server``, as every command that talks to a server takes it (default None: ``EVALSI_SERVER``, else local)."""


def server_url(option: str | None) -> str:
    """The server's base URL."""
    return (option or os.environ.get("EVALSI_SERVER") or DEFAULT_SERVER).rstrip("/")


def call(server: str | None, method: str, path: str, body: Any = None, timeout: float = 120.0) -> dict[str, Any]:
    """One request; the answer's JSON object, or exit with the server's message."""
    token = os.environ.get("EVALSI_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = server_url(server) + path
    try:
        response = httpx.request(method, url, json=body, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        fail(f"cannot reach the evalsi server at {server_url(server)}: {exc}", EXIT_FAILED)
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code >= 400:
        _refused(response.status_code, data, response.text)
    if not isinstance(data, dict):
        fail(f"the server answered {response.status_code} without a JSON object", EXIT_FAILED)
    return data


def _refused(status: int, data: Any, text: str) -> NoReturn:
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    hint = " (set EVALSI_TOKEN to a token of the server)" if status == 401 else ""
    fail(f"{message or text[:300] or status}{hint}", EXIT_FAILED if status >= 500 else EXIT_BAD_INPUT)


def show(data: dict[str, Any]) -> None:
    """Print an answer as indented JSON on stdout."""
    stdout.print_json(orjson.dumps(data).decode())


@dataclass(frozen=True)
class IdCommands:
    """Commands of one resource group that take the resource's id, send one request and show the answer as JSON.

    The get, cancel and delete commands of the evaluator, dataset and job groups differ only in these values.
    """

    app: typer.Typer
    """The command group."""
    path: str
    """The resource's path, with ``{id}`` where the id goes."""
    id_name: str
    """The id argument's name, as usage and errors show it (``job_id``)."""
    id_help: str
    """The id argument's help."""

    def add(self, name: str, method: str, doc: str, suffix: str = "") -> None:
        """Add the command ``name ID``.

        Args:
            name: The command's name (``get``, ``delete``...).
            method: The HTTP method.
            doc: The command's help; its first line is the summary in the group's command list.
            suffix: What follows the resource's path (``/cancel``).

        """

        def command(**values: Any) -> None:
            show(call(values["server"], method, self.path.format(id=values[self.id_name]) + suffix))

        keyword = inspect.Parameter.KEYWORD_ONLY
        command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter(
                    self.id_name, keyword, default=typer.Argument(..., help=self.id_help), annotation=str
                ),
                inspect.Parameter("server", keyword, default=None, annotation=ServerOption),
            ],
            return_annotation=None,
        )
        command.__doc__ = doc
        self.app.command(name)(command)
