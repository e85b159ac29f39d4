"""Evaluating one checkpoint: serve it, run every run spec against it, store the results, compare with the base.

The run spec's target is pointed at the served checkpoint (``baseUrl`` and ``model`` from the serving strategy);
everything else (dataset, sampling, evaluators, gates) is the spec's. A spec with ``every: N`` is due at the steps
divisible by N, at the base and at the final step; a step no spec is due at is not served at all.

Results go to one file per step and spec (:mod:`evalsi.training._results`), so an evaluation that is already
complete is never run again, and one that was interrupted resumes where it stopped. With ``server=``, each
finished step is also stored as a run on an evalsi server (labelled ``training-run``, ``training-step`` and
``spec``), a step counts as done when the server holds it, and comparisons with the base are the server's
(``CompareRuns``).
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

from evalsi.errors import EvalsiError, SpecError
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
from evalsi.stats import Estimate, PairedComparison, RegressionRule, regressed
from evalsi.training._checkpoints import Checkpoint
from evalsi.training._curve import summary_estimates
from evalsi.training._results import add_checkpoint_metadata, is_complete, step_file
from evalsi.training._server_runs import ServerRuns
from evalsi.training._serving import Endpoint, ModelRef, Served, ServingStrategy, check_servable, model_ref

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
    """Metric -> paired comparison with the base (step − base), for every metric (none without base results)."""
    regressions: list[RegressionRule] = field(default_factory=list)
    reused: bool = False
    """Whether the results were already complete (nothing was evaluated)."""
    run_id: str | None = None
    """The run's id on the evalsi server (with ``server=``)."""
    summary: dict[str, Any] | None = None
    """The run's summary (read from ``path``, or as the server holds it with ``server=``)."""
    means: dict[str, Estimate] = field(default_factory=dict)
    """Metric -> its mean with the 95% interval at this step."""
    reason: str = ""
    """Why the spec is not ``ok`` at this step: records not generated, the run stopped, the gates that failed."""


@dataclass
class StepResult:
    """A checkpoint's evaluation: every spec's results, the gates and the regressions."""

    step: int | None
    specs: list[SpecStep]
    """The specs due at this step (see ``not_due`` for the others)."""
    seconds: float = 0.0
    not_due: dict[str, int] = field(default_factory=dict)
    """Spec -> its ``every``: the specs not due at this step, so not evaluated."""

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

    @property
    def evaluated(self) -> bool:
        """Whether any spec was due at this step (a step no spec is due at is neither served nor evaluated)."""
        return bool(self.specs)

    def log_metrics(self) -> dict[str, float]:
        """Every spec's metric means as a trainer logs them: ``eval/<spec>/<metric>``."""
        return {
            f"eval/{spec.spec}/{metric}": estimate.mean
            for spec in self.specs
            for metric, estimate in spec.means.items()
            if not math.isnan(estimate.mean)
        }

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
    """The spec with the caller's overrides applied."""
    base_dir: Path
    name: str
    metrics: list[str]
    every: int | None

    def due(self, step: int | None, final: bool) -> bool:
        """Whether this spec is evaluated at ``step``: the base, the final step, and every ``every`` steps."""
        return step is None or final or self.every is None or step % self.every == 0


class CheckpointEvaluator:
    """Evaluates checkpoints of one training run against run specs, through a serving strategy.

    Args:
        specs: A RunSpec YAML file, or several (each file's single RunSpec).
        training_run: The training run's name (results go under ``log_dir/training_run``).
        serving: How a checkpoint is served (default: the spec's own endpoint).
        regression: ``METRIC[:MAX_DROP]`` rules checked against the base model's results.
        log_dir: Where step results are kept (relative to the working directory when the evaluator is made).
        overrides: ``path.to.field=value`` overrides applied to every spec (as ``evalsi run --set``; a path they
            set is relative to the working directory, as the spec files and ``log_dir`` are).
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
        # Paths are fixed now, against the working directory of the caller: the spec's own paths are relative to
        # its file, and nothing follows a later change of directory (a trainer's, a notebook's).
        self.log_dir = Path(log_dir).expanduser().absolute()
        self.overrides = list(overrides)
        self.progress = progress
        self.on_stage = on_stage
        self.server = ServerRuns(RunsClient(server, token=token), training_run) if server else None
        self.specs = [self._load(Path(path).expanduser().absolute()) for path in paths]
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
        resource = apply_overrides(select_resource(load_resources(path), "RunSpec", None, str(path)), self.overrides)
        probe = self._target_overrides(Served("http://127.0.0.1:1/v1", "model"))
        if isinstance(self.serving, Endpoint) and self.serving.base_url is None:
            probe = []  # the spec's own target is used as written
        bound = bind_run(apply_overrides(resource, probe), path.parent)
        return _Spec(resource, path.parent, resource.name, bound.metric_names(), bound.body.every)

    # --- cadence ----------------------------------------------------------------------------------------------

    def due(self, step: int | None, *, final: bool = False) -> list[str]:
        """The names of the specs evaluated at ``step``.

        All of them at the base and the ``final`` step; else those whose ``every`` divides the step (a spec
        without ``every`` is due at every step).
        """
        return [s.name for s in self.specs if s.due(step, final)]

    def cadence(self) -> dict[str, int]:
        """Spec -> its ``every``, for the specs that set one (the others are due at every step)."""
        return {s.name: s.every for s in self.specs if s.every is not None}

    def _due(self, step: int | None, final: bool) -> list[_Spec]:
        return [s for s in self.specs if s.due(step, final)]

    # --- results ----------------------------------------------------------------------------------------------

    def result_path(self, spec: str, step: int | None) -> Path:
        """Where a spec's results for a step are kept."""
        return step_file(self.log_dir, self.training_run, spec, step)

    def is_done(self, step: int | None, *, final: bool = False) -> bool:
        """Whether the results of every spec due at this step are complete (it is never evaluated again).

        With a server, the server's runs decide: a step evaluated here but not yet stored there is not done.
        """
        due = self._due(step, final)
        if self.server is not None:
            return all(self.server.is_complete(s.name, step) for s in due)
        return all(is_complete(self.result_path(s.name, step)) for s in due)

    def _stored(self, spec: str, step: int | None) -> bool:
        """Whether this step of ``spec`` needs no evaluation: complete here (embedded) or on the server."""
        if self.server is not None and self.server.is_complete(spec, step):
            return True
        return is_complete(self.result_path(spec, step))

    # --- evaluation -------------------------------------------------------------------------------------------

    def evaluate(
        self,
        checkpoint: str | Path | Checkpoint,
        step: int | None = None,
        *,
        settled_at: float | None = None,
        final: bool = False,
    ) -> StepResult:
        """Serve and evaluate a checkpoint (``step`` None: the base model) against the specs due at its step.

        ``checkpoint`` is a local path, a :class:`Checkpoint`, or for the base model a served model's name. A
        spec is due at the base, at the ``final`` step (the last of training), and at the steps its ``every``
        divides; complete results are reused, and a step no spec is due at is not served at all.

        Raises:
            UnservableError: The checkpoint is not there, or the serving strategy cannot serve what it holds.
            EvalsiError: Serving or generation failed, or the results were not written where they belong.

        """
        if isinstance(checkpoint, Checkpoint):
            location: str | Path = checkpoint.path
            step = checkpoint.step if step is None else step
        else:
            location = checkpoint
        started = time.perf_counter()
        due = self._due(step, final)
        not_due = {name: every for name, every in self.cadence().items() if name not in {s.name for s in due}}
        if not due:
            return StepResult(step, [], 0.0, not_due)
        ref = model_ref(location, step, self.training_run)
        todo = [s for s in due if not self._stored(s.name, step)]
        if todo:
            check_servable(self.serving, ref)
            self._stage(ref.label, f"serving ({self.serving.name})")
            with self.serving.serve(ref) as served:
                for spec in todo:
                    self._stage(ref.label, f"evaluating {spec.name}")
                    self._run(spec, ref, served, settled_at)
        if self.server is not None:
            for spec in due:  # finished here, not yet on the server (also after an interrupted upload)
                path = self.result_path(spec.name, step)
                if not self.server.is_complete(spec.name, step) and path.exists():
                    self._stage(ref.label, f"storing {spec.name} on {self.server.client.server}")
                    self.server.store(path, spec.name, step)
        self._stage(ref.label, "comparing with base")
        result = StepResult(
            step, [self._outcome(s, step, reused=s not in todo) for s in due], time.perf_counter() - started, not_due
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
        return bind_run(apply_overrides(spec.resource, extra), spec.base_dir)

    def _run(self, spec: _Spec, ref: ModelRef, served: Served, settled_at: float | None) -> None:
        bound = self._bind(spec, ref, served)
        expected = self.result_path(spec.name, ref.step)
        if bound.output.absolute() != expected:  # the step files are where is_done, the curve and the hooks look
            raise EvalsiError(f"{spec.name}: results would go to {bound.output}, not {expected}")
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
        rules = [r for r in self.rules if r.metric in spec.metrics]
        path = self.result_path(spec.name, step)
        data = read_results(path) if path.exists() else {}
        if self.server is not None:
            found = self.server.outcome(spec.name, step, rules, spec.metrics)
            summary = found.summary or {}
            return SpecStep(
                spec.name,
                path,
                found.status,
                found.gates_passed,
                found.comparisons,
                found.regressions,
                reused=reused,
                run_id=found.run_id,
                summary=found.summary,
                means=summary_estimates(summary),
                reason=spec_reason(found.status, summary, data),
            )
        summary = data.get("summary") or {}
        status = str(data.get("status", "missing"))
        out = SpecStep(
            spec.name,
            path,
            status,
            all(g.get("passed") for g in summary.get("gates") or []),
            reused=reused,
            summary=summary,
            means=summary_estimates(summary),
            reason=spec_reason(status, summary, data) if path.exists() else f"no results at {path}",
        )
        base = self.result_path(spec.name, None)
        if step is not None and base.exists() and path.exists():
            out.comparisons, out.regressions = compare_with_base(base, path, rules, spec.metrics)
        return out


def compare_with_base(
    base: Path, step: Path, rules: Sequence[RegressionRule], metrics: Sequence[str] = ()
) -> tuple[dict[str, PairedComparison], list[RegressionRule]]:
    """Paired comparisons of a step with the base for ``metrics`` and the rules' metrics, and the rules that failed.

    A metric one of the two runs lacks is left out (a rule on it does not fail).
    """
    wanted = list(dict.fromkeys([*metrics, *(r.metric for r in rules)]))
    if not wanted:
        return {}, []
    base_run, step_run = load_results(base), load_results(step)
    names = [{m.name for m in run.metrics} | set(run.pass_k) for run in (base_run, step_run)]
    shared = [m for m in wanted if m in names[0] and m in names[1]]
    if not shared:
        return {}, []
    by_metric = {c.metric: c.comparison for c in compare_runs(base_run, step_run, shared)}
    return by_metric, [r for r in rules if r.metric in by_metric and regressed(by_metric[r.metric], r)]


def spec_reason(status: str, summary: dict[str, Any], data: dict[str, Any]) -> str:
    """Why a spec's step is not ``ok``: the run stopped, records were not generated, or gates failed ('' if ok).

    ``data`` is the step's results file (empty when there is none here, as with a server's run).
    """
    aborted = data.get("aborted")
    if aborted:
        return f"the run stopped (onError: raise): {aborted}"
    failed = data.get("failed") or {}
    if failed:
        key, why = next(iter(failed.items()))
        return f"{len(failed)} record(s) could not be generated (first: {key}: {why}); run again to resume them"
    if status != "complete":
        return f"the run is {status}"
    gates = [g for g in summary.get("gates") or [] if not g.get("passed")]
    return "; ".join(f"gate {g.get('metric')} failed: {g.get('reason') or 'outside its bounds'}" for g in gates)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat() if math.isfinite(seconds) else ""


def describe_result(result: StepResult) -> dict[str, Any]:
    """JSON form of a step's evaluation (what ``checkpoints eval --json`` prints).

    Per spec: each metric's mean with its 95% interval (``metrics``), its change from the base (``differences``,
    with ``significant``), the rules that regressed, and why a spec is not ok (``reason``).
    """
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
                "reason": s.reason,
                "metrics": {m: e.to_dict() for m, e in s.means.items()},
                "regressions": [str(r) for r in s.regressions],
                "differences": {
                    m: {**c.difference.to_dict(), "significant": c.significant} for m, c in s.comparisons.items()
                },
                **({"runId": s.run_id} if s.run_id is not None else {}),
            }
            for s in result.specs
        ],
        "notDue": dict(result.not_due),
    }
