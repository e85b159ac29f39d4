"""The Weights & Biases logger: one W&B run per training run (or ``evalsi run``), resumed by a stable id.

Each step is one history entry: the metrics with ``eval/step`` (every ``eval/*`` metric is plotted against it,
as the trainer hooks ask W&B to), and each spec's per-record table as a ``wandb.Table``. Each step also logs an
``evaluation`` artifact per spec holding that table and a reference to the results file. ``mode: offline`` keeps
the run on disk for ``wandb sync``. The library is W&B's own (``evalsi[wandb]``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalsi.runs._loggers import LoggedRun, LoggerError, metric_values, missing_library, record_table, safe_name


def run_id(project: str, group: str) -> str:
    """The W&B run id of a group: the same for every step, so each step resumes the one run."""
    return "evalsi-" + hashlib.sha256(f"{project}\0{group}".encode()).hexdigest()[:16]


@dataclass
class WandbLogger:
    """Logs each step to the group's W&B run in ``project``."""

    project: str
    entity: str | None = None
    mode: str | None = None
    dir: Path | None = None
    name: str = "wandb"
    _wandb: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self._wandb is None:
            try:
                import wandb
            except ImportError:
                raise missing_library(self.name) from None
            self._wandb = wandb

    def log(self, group: str, step: int, runs: Sequence[LoggedRun]) -> None:
        """Resume the group's run, log this step to it, and finish it."""
        wandb = self._wandb
        # Read here, not left to W&B: its settings are read once per process, and a long-lived process (a
        # notebook, a test run) may change them between steps.
        folder = (
            self.dir if self.dir is not None else Path(os.environ["WANDB_DIR"]) if os.environ.get("WANDB_DIR") else None
        )
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        run = wandb.init(
            project=self.project,
            entity=self.entity or os.environ.get("WANDB_ENTITY") or None,
            mode=self.mode or os.environ.get("WANDB_MODE") or None,
            dir=None if folder is None else str(folder),
            id=run_id(self.project, group),
            name=group,
            resume="allow",
            reinit="create_new",
            settings=wandb.Settings(console="off", silent=True),
        )
        try:
            run.define_metric("eval/step")
            run.define_metric("eval/*", step_metric="eval/step")
            entry: dict[str, Any] = dict(metric_values(runs, step))
            artifacts = []
            for logged in runs:
                columns, rows = record_table(logged)
                table = wandb.Table(columns=columns, data=rows)
                entry[f"eval/{logged.spec}/records"] = table
                artifact = wandb.Artifact(
                    safe_name(f"{group}-{logged.spec}-step-{step}"),
                    type="evaluation",
                    metadata={"spec": logged.spec, "step": step, "results": str(logged.results)},
                )
                artifact.add(table, "records")
                artifact.add_reference(logged.results.absolute().as_uri(), name="results.json", checksum=False)
                artifacts.append(artifact)
            run.log(entry)
            for artifact in artifacts:
                run.log_artifact(artifact)
        except Exception as exc:
            run.finish(exit_code=1)
            raise LoggerError(f"wandb: {type(exc).__name__}: {exc}") from exc
        run.finish()
