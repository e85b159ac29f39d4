"""The MLflow logger: one tracking run per training run (or ``evalsi run``), found again by its ``evalsi.group`` tag.

Each step adds the metrics at the step (MLflow refuses ``@`` and ``^`` in a name, so ``pass@4/m`` is logged as
``pass_at_4/m`` and ``pass^4/m`` as ``pass_pow_4/m``), the per-record table as a CSV artifact
(``evalsi/<spec>/step-<N>/records.csv``) and, as tags, the results file each spec's latest step came from. The
client is MLflow's own (``evalsi[mlflow]``), talking to ``trackingUri`` (default ``$MLFLOW_TRACKING_URI``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evalsi.runs._loggers import LoggedRun, metric_values, missing_library, record_table, safe_name, table_csv

GROUP_TAG = "evalsi.group"
"""The tag naming the training run (or run) a tracking run holds."""
_INVALID = re.compile(r"[^\w.\- :/]")


def mlflow_key(name: str) -> str:
    """A metric name as MLflow accepts it (alphanumerics, ``_ - . : /`` and spaces)."""
    return _INVALID.sub("_", name.replace("@", "_at_").replace("^", "_pow_"))


@dataclass
class MlflowLogger:
    """Logs each step to a tracking run named after the group, in ``experiment``."""

    tracking_uri: str | None
    experiment: str
    name: str = "mlflow"
    _client_class: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self._client_class is None:
            try:
                from mlflow import MlflowClient
            except ImportError:
                raise missing_library(self.name) from None
            self._client_class = MlflowClient

    def log(self, group: str, step: int, runs: Sequence[LoggedRun]) -> None:
        """Add this step's metrics, tables and results links to the group's tracking run."""
        from mlflow.entities import Metric, RunTag

        client = self._client_class(self.tracking_uri)
        run_id = self._run_id(client, group)
        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_key(k), v, now, step) for k, v in metric_values(runs, step).items()]
        tags = [RunTag(f"evalsi.results.{mlflow_key(r.spec)}", r.results.absolute().as_uri()) for r in runs]
        client.log_batch(run_id, metrics=metrics, tags=tags)
        for run in runs:
            columns, rows = record_table(run)
            folder = f"evalsi/{safe_name(run.spec)}/step-{step}"
            client.log_text(run_id, table_csv(columns, rows), f"{folder}/records.csv")
            client.log_text(run_id, run.results.absolute().as_uri() + "\n", f"{folder}/results-file.txt")
        client.set_terminated(run_id)

    def _run_id(self, client: Any, group: str) -> str:
        experiment = client.get_experiment_by_name(self.experiment)
        found = experiment.experiment_id if experiment is not None else None
        experiment_id = found if found is not None else client.create_experiment(self.experiment)
        token = None
        while True:  # the group's run, compared here: a name is never pasted into a filter expression
            page = client.search_runs([experiment_id], max_results=1000, page_token=token)
            for run in page:
                if run.data.tags.get(GROUP_TAG) == group:
                    return str(run.info.run_id)
            token = page.token
            if not token:
                break
        created = client.create_run(experiment_id, run_name=group, tags={GROUP_TAG: group})
        return str(created.info.run_id)
