"""``ref: evaluator/ID``: an uploaded, ACTIVE evaluator's scoring function as a RewardSpec component on the server.

The component runs code (``resource.runs_code``, the sandbox floor applies). Before a request's spec is bound,
:class:`EvaluatorRefs` looks the id up in the caller's project (404 when unknown, 400 when not ACTIVE, both naming
the component) and fills in where the built evaluator lives and whose it is; a request may not set those params
itself. Each batch goes to the project's warm worker of that evaluator version (the one its jobs use, see
:mod:`._workers`), with the evaluator mounted read-only: the rollout becomes an ``EvaluationRow`` (its
prompt messages, then the completion as the assistant's reply, the reference as ``ground_truth``), grouped by
prompt for a ``groupwise`` test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from evalsi.errors import SandboxUnavailableError
from evalsi.evaluators import Evaluator, Params, Score, ScoreContext, register
from evalsi.records import Record
from evalsi.sandbox import Limits, require
from evalsi.server._errors import ServiceError
from evalsi.server.evaluation._ids import check_id
from evalsi.server.evaluation.evaluators._service import Evaluators
from evalsi.server.evaluation.evaluators._workers import BatchLimits, ScoringSession, WorkerKey

NAME = "evaluator"
MAX_ANSWER_BYTES = 16 << 20
"""Most bytes a batch's answer may have (past it, it is cut off unread and the batch's rollouts error)."""
SERVER_FILLED = ("directory", "runtime", "entry", "revision", "project")
"""Params the server fills in from its evaluator store; a request setting one is refused."""


class UploadedEvaluatorParams(Params):
    """Which uploaded evaluator scores, and the sandbox limits of a batch."""

    id: str = Field(min_length=1)
    """The evaluator's id in the caller's project (``ref: evaluator/ID``)."""
    min_isolation: Literal["process", "namespaced", "gvisor"] = "namespaced"
    timeout: float = Field(default=60.0, gt=0)
    """Seconds one batch may take in the sandbox (clamped to the server's ``sandbox.max_timeout``)."""
    memory_mb: int = Field(default=1024, ge=64)
    """Memory of the batch's sandbox (clamped to ``sandbox.max_memory_mb``)."""
    directory: str = ""
    runtime: str = ""
    entry: str = ""
    revision: str = ""
    project: str = ""


@register
class UploadedEvaluator(Evaluator[UploadedEvaluatorParams]):
    """Scores rollouts with an evaluator uploaded to this server, in the sandbox."""

    name = NAME
    summary = "An uploaded evaluator's scoring function, in the sandbox (server only; ref: evaluator/ID)."
    params_model = UploadedEvaluatorParams
    reads = ("prompt", "completion", "reference", "metadata")
    runs_code: ClassVar[bool] = True
    pack = "server"
    ref_argument: ClassVar[str | None] = "id"

    def score_batch(self, records: Sequence[Record], params: UploadedEvaluatorParams, ctx: ScoreContext) -> list[Score]:
        """Score the batch in one sandbox call; a failed row (or a failed sandbox) is an ``error`` score."""
        if not params.directory:
            reason = f"ref: evaluator/{params.id} names an evaluator uploaded to an evalsi server; score through it"
            return [Score.error(reason) for _ in records]
        try:
            rung = require(params.min_isolation)
        except SandboxUnavailableError as exc:  # never a lower rung: every rollout errors, so onError applies
            return [Score.error(str(exc)) for _ in records]
        limits = Limits(
            wall_time=params.timeout,
            cpu_time=max(1, int(params.timeout)),
            memory_bytes=params.memory_mb << 20,
            max_output_bytes=MAX_ANSWER_BYTES,
        )
        key = WorkerKey(
            params.project, params.id, params.revision, params.directory, params.entry, params.runtime, rung,
            limits.memory_bytes, limits.max_processes,
        )  # fmt: skip
        rows = [_row(record) for record in records]
        bounds = BatchLimits(params.timeout, MAX_ANSWER_BYTES, time_setting="timeout")
        with ScoringSession(key, limits, bounds) as session:
            results = session.score(rows)
        return [_score(result) for result in results]


def _row(record: Record) -> dict[str, Any]:
    prompt = record.prompt
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt or []]
    messages.append({"role": "assistant", "content": record.completion_text})
    group = record.pairing_key if record.id is None else record.id
    return {"messages": messages, "ground_truth": record.reference, "row_id": str(group), "metadata": record.metadata}


def _score(result: Mapping[str, Any]) -> Score:
    if "error" in result:
        return Score.error(str(result["error"]))
    return Score.ok(float(result["score"]), result.get("reason"))


class EvaluatorRefs:
    """Resolves ``ref: evaluator/ID`` components of a request's spec within the caller's project."""

    def __init__(self, evaluators: Evaluators) -> None:
        self.evaluators = evaluators

    def applies(self, spec: Mapping[str, Any]) -> bool:
        """Whether the spec has such a component (checked without a database query)."""
        return any(_is_ref(component) for _, component in _components(spec))

    def resolve(self, spec: Mapping[str, Any], project: str) -> dict[str, Any]:
        """``spec`` with each uploaded-evaluator component's params filled in from the store.

        Raises:
            ServiceError: A component sets a server-filled param (403), names no evaluator of the project (404),
                or one that is not ACTIVE (400); each names the component.

        """
        out = dict(spec)
        wrapped = "apiVersion" in out and isinstance(out.get("spec"), Mapping)
        body = dict(out["spec"]) if wrapped else out
        components = list(body.get("components") or [])
        for index, component in _components(spec):
            if not _is_ref(component):
                continue
            where = f"spec.components[{index}]"
            params = dict(component.get("params") or {})
            for name in SERVER_FILLED:
                if name in params:
                    raise ServiceError(
                        "permission_denied",
                        f"{where}.params.{name}: set by the server from its evaluator store, never by a request",
                        path=f"{where}.params.{name}",
                    )
            _, _, argument = str(component["ref"]).partition("/")
            evaluator_id = check_id(str(argument or params.get("id", "")), f"{where}.ref")
            ready = self.evaluators.ready(project, evaluator_id, f"{where}.ref")
            params.update(
                project=project,
                id=evaluator_id,
                directory=str(ready.directory),
                runtime=str(self.evaluators.runtime),
                entry=ready.entry,
                revision=ready.revision,
            )
            components[index] = {**component, "params": params}
        body["components"] = components
        if wrapped:
            out["spec"] = body
            return out
        return body


def _components(spec: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    body = spec.get("spec") if "apiVersion" in spec else spec
    if not isinstance(body, Mapping) or not isinstance(body.get("components"), list):
        return []
    return [(i, c) for i, c in enumerate(body["components"]) if isinstance(c, Mapping)]


def _is_ref(component: Mapping[str, Any]) -> bool:
    ref = component.get("ref")
    return isinstance(ref, str) and ref.partition("/")[0] == NAME
