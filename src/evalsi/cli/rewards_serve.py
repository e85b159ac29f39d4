"""``evalsi rewards serve``: a RewardSpec behind OpenRLHF's remote reward-model protocol."""

from __future__ import annotations

from pathlib import Path

import typer

from evalsi.cli._console import EXIT_FAILED, fail
from evalsi.errors import SpecError
from evalsi.rewards import load


def serve_command(
    spec: Path = typer.Option(..., "--spec", "-s", help="The RewardSpec YAML file."),
    port: int = typer.Option(5000, "--port", "-p", help="TCP port (0 picks a free one and prints it)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0 for every interface)."),
    name: str | None = typer.Option(None, "--name", help="Which RewardSpec, when the file holds several."),
    max_batch: int = typer.Option(
        4096, "--max-batch", min=1, help="Most rollouts scored in one engine call when requests queue up."
    ),
    log_level: str = typer.Option("warning", "--log-level", help="uvicorn's log level (debug, info, warning)."),
) -> None:
    """Serve the RewardSpec in SPEC to OpenRLHF's remote reward-model protocol.

    Point OpenRLHF at it with --reward.remote_url http://HOST:PORT/get_reward (--remote_rm_url before 0.10.2).

    POST / or /get_reward with {"query": [...], "prompts": [...], "labels": [...]} answers {"rewards",
    "scores", "extra_logs"}; GET /health answers {"status": "ok"}. SIGTERM finishes the requests in flight
    and exits 0.

    Exit codes: 0 stopped by a signal; 1 the address cannot be bound; 2 bad spec.
    """
    try:
        from evalsi.rewards.serve import run  # the HTTP server is imported only for this command
    except ImportError as exc:
        fail(f"evalsi rewards serve needs {exc.name or 'the server packages'}: pip install 'evalsi[serve]'")

    try:
        reward = load(spec, name)
        run(reward, host, port, max_batch=max_batch, log_level=log_level)
    except SpecError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}", EXIT_FAILED)
