"""Logging runs and checkpoint evaluations to TensorBoard and W&B (offline), read back with the real libraries.

These tests run in their own nox session (``nox -s loggers``), which installs tensorboardX, tensorboard (its
event-file reader) and wandb, and sets ``EVALSI_INTEGRATION``; the core suite does not collect them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from tests.helpers.openai_server import OpenAIServer
from tests.training.conftest import answers, write_model

if not os.environ.get("EVALSI_INTEGRATION"):
    collect_ignore_glob = ["*"]


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    """A served model answering the training tests' 30 questions right."""
    with OpenAIServer(answers=answers(), default="?") as srv:
        yield srv


def settled(folder: Path) -> Path:
    """A checkpoint directory whose files are long unchanged."""
    write_model(folder)
    for path in (folder, *folder.iterdir()):
        os.utime(path, (1_000_000_000, 1_000_000_000))
    return folder


def invoke(*args: str) -> Any:
    """The ``evalsi`` command in this process."""
    return CliRunner().invoke(app, list(args), terminal_width=200)


def add_loggers(spec: Path, loggers: dict[str, Any]) -> Path:
    """Give a RunSpec file (JSON, as the training tests write it) a ``loggers:`` section."""
    document = json.loads(spec.read_text())
    document["spec"]["loggers"] = loggers
    spec.write_text(json.dumps(document))
    return spec


def endpoint(spec: Path, logs: Path, server: OpenAIServer, *extra: str) -> list[str]:
    """``checkpoints`` options: the spec, training run ``r``, the already served model, the log dir."""
    return ["-f", str(spec), "--training-run", "r", "--serve", "endpoint", "--base-url", server.base_url,
            "--model", "m", "--log-dir", str(logs), "-q", *extra]  # fmt: skip
