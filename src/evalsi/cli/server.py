"""``evalsi server``: run the evalsi server, and manage its API tokens.

The server's modules need the ``server`` extra; they are imported when a command runs (not when ``evalsi``
starts), and a missing extra fails with the install command.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import typer

from evalsi.cli._console import EXIT_BAD_INPUT, EXIT_FAILED, fail, stderr, stdout
from evalsi.errors import SpecError

if TYPE_CHECKING:  # the server extra is imported only when a command runs
    from evalsi.server import ServerConfig, TokenStore

app = typer.Typer(
    help=(
        "Run the evalsi server (rewards, runs, evaluators and evaluation jobs over gRPC, Connect and HTTP JSON;"
        " the results viewer at /ui), and manage its API tokens."
    ),
    invoke_without_command=True,
)
token_app = typer.Typer(help="Create, list and revoke API tokens.", no_args_is_help=True)
app.add_typer(token_app, name="token")

CONFIG_HELP = "The server config: a YAML file with a `kind: ServerConfig` resource (default: built-in defaults)."


def _server() -> ModuleType:
    try:
        return importlib.import_module("evalsi.server")
    except ModuleNotFoundError as exc:
        fail(f"the server needs the `server` extra ({exc.name} is missing): pip install 'evalsi[server]'")


def _config(path: Path | None, overrides: dict[str, Any]) -> ServerConfig:
    server = _server()
    try:
        config: ServerConfig = server.load_config(path)
    except SpecError as exc:
        fail(str(exc))
    listen_update = {k: v for k, v in overrides.items() if k != "database" and v is not None}
    listen = config.spec.listen.model_copy(update=listen_update)
    spec_update: dict[str, Any] = {"listen": listen}
    if overrides.get("database"):
        spec_update["database"] = config.spec.database.model_copy(update={"url": overrides["database"]})
    return config.model_copy(update={"spec": config.spec.model_copy(update=spec_update)})


@app.callback()
def run(
    ctx: typer.Context,
    config: Path | None = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    host: str | None = typer.Option(None, "--host", help="Listen address (overrides listen.host)."),
    port: int | None = typer.Option(None, "--port", help="HTTP port (overrides listen.port; 0 picks one)."),
    grpc_port: int | None = typer.Option(None, "--grpc-port", help="gRPC port (overrides listen.grpc_port)."),
    database: str | None = typer.Option(None, "--database", help="Database URL (overrides database.url)."),
) -> None:
    """Serve the Reward Service until SIGTERM, which drains in-flight calls before exiting.

    Prints one JSON line on stdout when ready: {"event": "ready", "http": URL, "grpc": HOST:PORT}.
    """
    if ctx.invoked_subcommand is not None:
        ctx.ensure_object(dict)["config"] = config
        ctx.obj["database"] = database
        return
    settings = _config(config, {"host": host, "port": port, "grpc_port": grpc_port, "database": database})
    server = _server()
    database_error = importlib.import_module("sqlalchemy.exc").SQLAlchemyError
    try:
        server.serve(settings)
    except (SpecError, ModuleNotFoundError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot start the server: {exc}", EXIT_BAD_INPUT)
    except database_error as exc:
        fail(f"cannot open the database {settings.database_url!r}: {exc}", EXIT_FAILED)


def _tokens(ctx: typer.Context, config: Path | None, database: str | None) -> TokenStore:
    parent = ctx.obj or {}
    settings = _config(config or parent.get("config"), {"database": database or parent.get("database")})
    server = _server()
    store: TokenStore = server.TokenStore(server.open_database(settings.database_url))
    return store


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    project: str = typer.Option(..., "--project", "-p", help="The project the token acts for (quotas apply to it)."),
    permission: list[str] = typer.Option(
        ["evaluations.run"],
        "--permission",
        help="A permission: evaluations.run, resource.runs_code, metrics.read, evaluators.write (repeatable).",
    ),
    name: str = typer.Option("", "--name", help="A label for listings (default: the project)."),
    config: Path | None = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    database: str | None = typer.Option(None, "--database", help="Database URL (overrides database.url)."),
) -> None:
    """Create a token and print its secret on stdout (shown once; only its hash is stored)."""
    store = _tokens(ctx, config, database)
    try:
        secret = store.create(project, permission, name)
    except ValueError as exc:
        fail(str(exc))
    typer.echo(secret)
    stderr.print(
        f"token for project {project!r} with {', '.join(dict.fromkeys(permission))}; "
        "pass it as `Authorization: Bearer <token>` (EVALSI_TOKEN for the library's server= option)"
    )


@token_app.command("list")
def token_list(
    ctx: typer.Context,
    config: Path | None = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    database: str | None = typer.Option(None, "--database", help="Database URL (overrides database.url)."),
) -> None:
    """List tokens (id, name, project, permissions, revoked); secrets are never shown again."""
    for info in _tokens(ctx, config, database).list():
        state = "revoked" if info.revoked else "active"
        stdout.print(f"{info.id}\t{info.name}\t{info.project}\t{' '.join(info.permissions)}\t{state}", highlight=False)


@token_app.command("revoke")
def token_revoke(
    ctx: typer.Context,
    token_id: int = typer.Argument(..., help="The token's id (from `evalsi server token list`)."),
    config: Path | None = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    database: str | None = typer.Option(None, "--database", help="Database URL (overrides database.url)."),
) -> None:
    """Revoke a token; servers refuse it within seconds."""
    if not _tokens(ctx, config, database).revoke(token_id):
        fail(f"no active token with id {token_id}")
    stderr.print(f"revoked token {token_id}")


if __name__ == "__main__":  # `python -m evalsi.cli.server` works before `evalsi server` is mounted
    app(prog_name="evalsi server")
