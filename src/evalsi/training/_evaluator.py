"""Evaluating one checkpoint: serve it, run every run spec against it, store the results, compare with the base.

The run spec's target is pointed at the served checkpoint (``baseUrl`` and ``model`` from the serving strategy);
everything else (dataset, sampling, evaluators, gates) is the spec's. Results go to one file per step and spec
(:mod:`evalsi.training._results`), so an evaluation that is already complete is never run again, and one that
was interrupted resumes where it stopped. With ``server=``, each finished step is also stored as a run on an
evalsi server (labelled ``training-run``, ``training-step`` and ``spec``), a step counts as done when the server
holds it, and comparisons with the base are the server's (``CompareRuns``).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalsi.errors import DataError, SpecError
from evalsi.runs import (
    BoundRun,
    ResumeError,
    Runner,
    RunsClient,
    apply_overrides,
    bind_run,
    compare_runs,
    load_results,
    read_results,
)
from evalsi.specs import Resource, load_resources, select_resource
from evalsi.stats import PairedComparison, RegressionRule, regressed
from evalsi.training._checkpoints import Checkpoint
from evalsi.training._results import add_checkpoint_metadata, is_complete, step_file
from evalsi.training._server_runs import ServerRuns
from evalsi.training._serving import Endpoint, ModelRef, Served, ServingStrategy, model_ref

log = logging.getLogger(__name__)

Stage = Callable[[str, str], None]
"""``on_stage(label, stage)``: a step (``base``, ``100``) entered a stage (``serving``, ``evaluating x``...)."""

DEFAULT_LOG_DIR = Path("evalsi-logs")


@dataclass
class SpecStep:
    """One run spec's results for one step."""

    spec: str
    path: Path
    status: str
    """``complete`` or ``partial`` (records failed to generate, or the run stopped under ``onError: raise``)."""
    gates_passed: bool
    comparisons: dict[str, PairedComparison] = field(default_factory=dict)
    """Metric -> paired comparison with the base (step − base), for the metrics with a regression rule."""
    regressions: list[RegressionRule] = field(default_factory=list)
    reused: bool = False
    """Whether the results were already complete (nothing was evaluated)."""
    run_id: str | None = None
    """The run's id on the evalsi server (with ``server=``)."""
    summary: dict[str, Any] | None = None
    """The run's summary as the server holds it (with ``server=``; else it is read from ``path``)."""


@dataclass
class StepResult:
    """A checkpoint's evaluation: every spec's results, the gates and the regressions."""

    step: int | None
    specs: list[SpecStep]
    seconds: float = 0.0

    @property
    def label(self) -> str:
        """``base`` or the step number."""
        return "base" if self.step is None else str(self.step)

    @property
    def regressed(self) -> bool:
        """Whether any regression rule failed."""
        return any(s.regressions for s in self.specs)

    @property
    def gates_passed(self) -> bool:
        """Whether every spec's own gates passed."""
        return all(s.gates_passed for s in self.specs)

    @property
    def complete(self) -> bool:
        """Whether every spec finished every record."""
        return all(s.status == "complete" for s in self.specs)

    def log_metrics(self) -> dict[str, float]:
        """Every spec's metric means as a trainer logs them: ``eval/<spec>/<metric>``."""
        out: dict[str, float] = {}
        for spec in self.specs:
            try:
                summary = spec.summary if spec.summary is not None else read_results(spec.path).get("summary") or {}
            except DataError:
                continue
            for metric, estimate in (summary.get("metrics") or {}).items():
                mean = estimate.get("mean") if isinstance(estimate, dict) else None
                if isinstance(mean, int | float) and not isinstance(mean, bool):
                    out[f"eval/{spec.spec}/{metric}"] = float(mean)
        return out

    @property
    def status(self) -> str:
        """``regressed``, ``gate failed``, ``partial`` or ``ok``."""
        if self.regressed:
            return "regressed"
        if not self.complete:
            return "partial"
        return "ok" if self.gates_passed else "gate failed"


@dataclass
class _Spec:
    resource: Resource
    base_dir: Path
    name: str
    metrics: list[str]


class CheckpointEvaluator:
    """Evaluates checkpoints of one training run against run specs, through a serving strategy.

    Args:
        specs: A RunSpec YAML file, or several (each file's single RunSpec).
        training_run: The training run's name (results go under ``log_dir/training_run``).
        serving: How a checkpoint is served (default: the spec's own endpoint).
        regression: ``METRIC[:MAX_DROP]`` rules checked against the base model's results.
        log_dir: Where step results are kept.
        overrides: ``path.to.field=value`` overrides applied to every spec (as ``evalsi run --set``).
        progress: Show each run's progress bar on stderr.
        on_stage: Called as each step enters a stage (for progress displays).
        server: An evalsi server's URL: each step is stored there as a run, and compared there with the base.
        token: The server token (default: ``$EVALSI_TOKEN``); it needs ``evaluations.run``.

    Raises:
        SpecError: A spec is invalid, or a regression rule names a metric no spec has.

    """

    def __init__(
        self,
        specs: str | Path | Sequence[str | Path],
        training_run: str,
        serving: ServingStrategy | None = None,
        *,
        regression: Sequence[str | RegressionRule] = (),
        log_dir: str | Path = DEFAULT_LOG_DIR,
        overrides: Sequence[str] = (),
        progress: bool = False,
        on_stage: Stage | None = None,
        server: str | None = None,
        token: str | None = None,
    ) -> None:
        paths = [specs] if isinstance(specs, str | Path) else list(specs)
        if not paths:
            raise SpecError("give at least one run spec (-f spec.yaml)")
        if not training_run.strip():
            raise SpecError("the training run needs a name (--training-run NAME)")
        self.training_run = training_run
        self.serving: ServingStrategy = serving if serving is not None else Endpoint()
        self.log_dir = Path(log_dir)
        self.overrides = list(overrides)
        self.progress = progress
        self.on_stage = on_stage
        self.server = ServerRuns(RunsClient(server, token=token), training_run) if server else None
        self.specs = [self._load(Path(path)) for path in paths]
        names = [s.name for s in self.specs]
        if len(set(names)) != len(names):
            raise SpecError(f"two run specs share a name ({', '.join(names)}); their results would mix")
        try:
            self.rules = [r if isinstance(r, RegressionRule) else RegressionRule.parse(r) for r in regression]
        except ValueError as exc:
            raise SpecError(str(exc), file="--regression") from None
        known = {m for s in self.specs for m in s.metrics}
        for rule in self.rules:
            if rule.metric not in known:
                raise SpecError(
                    f"{rule.metric!r} is not a metric of the run specs (metrics: {', '.join(sorted(known))})",
                    file="--regression",
                )

    def _load(self, path: Path) -> _Spec:
        resource = select_resource(load_resources(path), "RunSpec", None, str(path))
        probe = self._target_overrides(Served("http://127.0.0.1:1/v1", "model"))
        if isinstance(self.serving, Endpoint) and self.serving.base_url is None:
            probe = []  # the spec's own target is used as written
        bound = bind_run(apply_overrides(resource, [*self.overrides, *probe]), path.parent)
        return _Spec(resource, path.parent, resource.name, bound.metric_names())

    # --- results ----------------------------------------------------------------------------------------------

    def result_path(self, spec: str, step: int | None) -> Path:
        """Where a spec's results for a step are kept."""
        return step_file(self.log_dir, self.training_run, spec, step)

    def is_done(self, step: int | None) -> bool:
        """Whether every spec's results for this step are complete (it is never evaluated again).

        With a server, the server's runs decide: a step evaluated here but not yet stored there is not done.
        """
        if self.server is not None:
            return all(self.server.is_complete(s.name, step) for s in self.specs)
        return all(is_complete(self.result_path(s.name, step)) for s in self.specs)

    def _stored(self, spec: str, step: int | None) -> bool:
        """Whether this step of ``spec`` needs no evaluation: complete here (embedded) or on the server."""
        if self.server is not None and self.server.is_complete(spec, step):
            return True
        return is_complete(self.result_path(spec, step))

    # --- evaluation -------------------------------------------------------------------------------------------

    def evaluate(
        self, checkpoint: str | Path | Checkpoint, step: int | None = None, *, settled_at: float | None = None
    ) -> StepResult:
        """Serve and evaluate a checkpoint (``step`` None: the base model), unless its results are complete.

        ``checkpoint`` is a local path, a :class:`Checkpoint`, or for the base model a served model's name.
        """
        if isinstance(checkpoint, Checkpoint):
            location: str | Path = checkpoint.path
            step = checkpoint.step if step is None else step
        else:
            location = checkpoint
        started = time.perf_counter()
        ref = model_ref(location, step, self.training_run)
        todo = [s for s in self.specs if not self._stored(s.name, step)]
        if todo:
            self._stage(ref.label, f"serving ({self.serving.name})")
            with self.serving.serve(ref) as served:
                for spec in todo:
                    self._stage(ref.label, f"evaluating {spec.name}")
                    self._run(spec, ref, served, settled_at)
        if self.server is not None:
            for spec in self.specs:  # finished here, not yet on the server (also after an interrupted upload)
                path = self.result_path(spec.name, step)
                if not self.server.is_complete(spec.name, step) and path.exists():
                    self._stage(ref.label, f"storing {spec.name} on {self.server.client.server}")
                    self.server.store(path, spec.name, step)
        self._stage(ref.label, "comparing with base")
        result = StepResult(
            step, [self._outcome(s, step, reused=s not in todo) for s in self.specs], time.perf_counter() - started
        )
        self._stage(ref.label, result.status)
        return result

    def _stage(self, label: str, stage: str) -> None:
        if self.on_stage is not None:
            self.on_stage(label, stage)

    @staticmethod
    def _target_overrides(served: Served) -> list[str]:
        extra = []
        if served.base_url is not None:
            extra += [f"target.baseUrl={json.dumps(served.base_url)}", "target.callable=null"]
        if served.model is not None:
            extra.append(f"target.model={json.dumps(served.model)}")
        return extra

    def _bind(self, spec: _Spec, ref: ModelRef, served: Served) -> BoundRun:
        name = f"{spec.name}@{'base' if ref.step is None else f'step-{ref.step}'}"
        extra = [
            f"output={json.dumps(str(self.result_path(spec.name, ref.step)))}",
            f"metadata.name={json.dumps(name)}",
            *self._target_overrides(served),
        ]
        return bind_run(apply_overrides(spec.resource, [*self.overrides, *extra]), spec.base_dir)

    def _run(self, spec: _Spec, ref: ModelRef, served: Served, settled_at: float | None) -> None:
        bound = self._bind(spec, ref, served)
        try:
            outcome = Runner(bound, progress=self.progress).run()
        except ResumeError:
            # The interrupted evaluation served other files under this step (the checkpoint was rewritten).
            log.warning("%s: earlier partial results are from other checkpoint files; starting over", bound.output)
            outcome = Runner(bound, progress=self.progress, restart=True).run()
        add_checkpoint_metadata(
            outcome.path,
            {
                "trainingRun": self.training_run,
                "step": ref.step,
                "label": ref.label,
                "location": ref.location,
                "kind": ref.files.kind if ref.files is not None else None,
                "fingerprint": ref.fingerprint,
                "servedAs": served.model,
                "serving": self.serving.name,
                "settledAt": None if settled_at is None else _iso(settled_at),
                "evaluatedAt": _iso(time.time()),
            },
        )

    def _outcome(self, spec: _Spec, step: int | None, *, reused: bool) -> SpecStep:
        if self.server is not None:
            found = self.server.outcome(spec.name, step, [r for r in self.rules if r.metric in spec.metrics])
            return SpecStep(
                spec.name,
                self.result_path(spec.name, step),
                found.status,
                found.gates_passed,
                found.comparisons,
                found.regressions,
                reused=reused,
                run_id=found.run_id,
                summary=found.summary,
            )
        path = self.result_path(spec.name, step)
        data = read_results(path) if path.exists() else {}
        gates = (data.get("summary") or {}).get("gates") or []
        out = SpecStep(
            spec.name, path, str(data.get("status", "missing")), all(g.get("passed") for g in gates), reused=reused
        )
        base = self.result_path(spec.name, None)
        rules = [r for r in self.rules if r.metric in spec.metrics]
        if step is not None and rules and base.exists() and path.exists():
            out.comparisons, out.regressions = compare_with_base(base, path, rules)
        return out


def compare_with_base(
    base: Path, step: Path, rules: Sequence[RegressionRule]
) -> tuple[dict[str, PairedComparison], list[RegressionRule]]:
    """Paired comparisons of a step with the base for the rules' metrics, and the rules that failed."""
    if not rules:
        return {}, []
    compared = compare_runs(load_results(base), load_results(step), list(dict.fromkeys(r.metric for r in rules)))
    by_metric = {c.metric: c.comparison for c in compared}
    return by_metric, [r for r in rules if regressed(by_metric[r.metric], r)]


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat() if math.isfinite(seconds) else ""


def describe_result(result: StepResult) -> dict[str, Any]:
    """JSON form of a step's evaluation (what ``checkpoints eval --json`` prints)."""
    return {
        "step": result.step,
        "label": result.label,
        "status": result.status,
        "seconds": round(result.seconds, 3),
        "specs": [
            {
                "spec": s.spec,
                "path": str(s.path),
                "status": s.status,
                "gatesPassed": s.gates_passed,
                "reused": s.reused,
                "regressions": [str(r) for r in s.regressions],
                "differences": {m: c.difference.to_dict() for m, c in s.comparisons.items()},
                **({"runId": s.run_id} if s.run_id is not None else {}),
            }
            for s in result.specs
        ],
    }
