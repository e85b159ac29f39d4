"""Embedded checkpoint results: one run results file per step, under ``<log-dir>/<training-run>/<spec>/``.

Each file is an ordinary :mod:`evalsi.runs` results file (``kind: RunResults``, every record's samples, so steps
pair with the base record by record), written atomically by the run engine, plus a ``checkpoint`` section::

    "checkpoint": {"trainingRun", "step": int | null, "label": "base" | "100", "location", "kind",
                   "fingerprint", "servedAs", "serving", "settledAt", "evaluatedAt"}

The base model's file is ``base.json``, a step's ``step-<N>.json``. A step is done when its file is complete;
a killed evaluation leaves a partial file and a journal, and resumes from them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from evalsi._util.atomic import atomic_writer
from evalsi.errors import DataError
from evalsi.runs import read_results

_FILE = re.compile(r"^(?:base|step-(\d+))\.json$")


def safe_name(name: str) -> str:
    """A training-run or spec name as a single path component (no separators, no dots alone)."""
    cleaned = re.sub(r"[^A-Za-z0-9._@-]+", "-", name).strip("-.")
    return cleaned or "run"


def run_dir(log_dir: Path, training_run: str, spec_name: str) -> Path:
    """The folder holding one spec's step files for one training run."""
    return Path(log_dir) / safe_name(training_run) / safe_name(spec_name)


def step_file(log_dir: Path, training_run: str, spec_name: str, step: int | None) -> Path:
    """``base.json`` or ``step-<N>.json`` of a spec in a training run."""
    name = "base.json" if step is None else f"step-{step}.json"
    return run_dir(log_dir, training_run, spec_name) / name


def step_files(log_dir: Path, training_run: str, spec_name: str) -> dict[int | None, Path]:
    """Every step file there is, keyed by step (None for the base), in step order after the base."""
    folder = run_dir(log_dir, training_run, spec_name)
    found: dict[int | None, Path] = {}
    if not folder.is_dir():
        return found
    for path in folder.iterdir():
        match = _FILE.match(path.name)
        if match:
            found[None if match.group(1) is None else int(match.group(1))] = path
    return dict(sorted(found.items(), key=lambda item: -1 if item[0] is None else item[0]))


def is_complete(path: Path) -> bool:
    """Whether a step file exists, is a results file, and its run finished (``status: complete``)."""
    if not path.exists():
        return False
    try:
        return read_results(path).get("status") == "complete"
    except DataError:
        return False


def add_checkpoint_metadata(path: Path, metadata: Mapping[str, Any]) -> None:
    """Add the ``checkpoint`` section to a finished results file (rewritten atomically)."""
    data = read_results(path)
    data["checkpoint"] = dict(metadata)
    with atomic_writer(path) as handle:
        handle.write(orjson.dumps(data, option=orjson.OPT_INDENT_2, default=str))


def checkpoint_metadata(path: Path) -> dict[str, Any]:
    """The ``checkpoint`` section of a step file (empty when it has none)."""
    section = read_results(path).get("checkpoint")
    return dict(section) if isinstance(section, dict) else {}
