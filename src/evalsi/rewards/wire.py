"""The JSON wire form of reward results and errors, in both directions.

Everything that writes or reads a reward result or an error as JSON goes through here: the evalsi server's HTTP
JSON route, its ``server=`` client, ``evalsi rewards score`` output files and ``evalsi rewards serve`` errors.

A result (``POST /v1alpha1/rewards:score`` answers ``{"results": [...]}``, one per rollout)::

    {"index": 0, "total": 0.9 | null, "status": "ok" | "gated" | "no_total",
     "components": {"<name>": {"value": 1.0 | true | null, "status": "ok" | "skipped" | "error",
                               "reason": "..." | null}}}

An error (any non-2xx answer)::

    {"error": {"code": "<contract code>", "status": "<canonical code>", "message": "...", <fields>}}

Contract codes a client acts on: ``reward_batch_failed`` (with ``index``, ``component``, ``cause``: a component
errored under ``onError: raise``), ``invalid_rollout`` (with ``index`` and ``detail``), ``invalid_spec``
(with ``path``). The canonical ``status`` is a gRPC/Connect code name (``invalid_argument``,
``permission_denied``...); the HTTP status follows from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalsi._util.jsontypes import JSON
from evalsi.errors import DataError, EvalsiError, RewardBatchError, RewardServiceError, SpecError
from evalsi.evaluators import STATUSES, Score
from evalsi.rewards._compose import RewardResult

RESULT_STATUSES = ("ok", "gated", "no_total")

ErrorBody = dict[str, dict[str, JSON]]
"""``{"error": {...}}``."""

HTTP_STATUS: dict[str, int] = {
    "invalid_argument": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "failed_precondition": 422,
    "resource_exhausted": 429,
    "internal": 500,
    "unavailable": 503,
}
"""HTTP status of each canonical code. A batch failed under ``onError: raise`` is 422: the request was valid,
but the state of a component (the sandbox is down, say) prevented a reward."""


def score_json(score: Score, *, details: bool = False) -> dict[str, JSON]:
    """One component's score: ``{value, status, reason}`` (and ``details`` when asked for and present)."""
    out: dict[str, JSON] = {"value": score.value, "status": score.status, "reason": score.reason}
    if details and score.details:
        out["details"] = dict(score.details)
    return out


def result_json(
    result: RewardResult,
    index: int,
    *,
    record_id: str | None = None,
    details: bool = False,
    memo: dict[int, dict[str, JSON]] | None = None,
) -> dict[str, JSON]:
    """One rollout's result; ``memo`` shares the JSON of a score object seen before (cache hits repeat them)."""
    components: dict[str, JSON] = {}
    for name, score in result.components.items():
        if memo is None or details:
            components[name] = score_json(score, details=details)
            continue
        entry = memo.get(id(score))
        if entry is None:
            entry = memo[id(score)] = score_json(score)
        components[name] = entry
    out: dict[str, JSON] = {"index": index}
    if record_id is not None:
        out["id"] = record_id
    out.update(total=result.total, status=result.status, components=components)
    return out


def results_json(results: Sequence[RewardResult]) -> dict[str, JSON]:
    """The body of a scoring answer: ``{"results": [...]}`` in rollout order.

    Cache hits hand back the same ``Score`` object for the same content, so each distinct score is converted once
    per call (GRPO batches repeat completions; a warm cache repeats whole batches).
    """
    memo: dict[int, dict[str, JSON]] = {}
    return {"results": [result_json(result, index, memo=memo) for index, result in enumerate(results)]}


def result_from_json(item: Mapping[str, Any]) -> RewardResult:
    """A result read back from its JSON form.

    Raises:
        ValueError: A status is unknown.
        KeyError: A required field is missing.

    """
    status = item["status"]
    if status not in RESULT_STATUSES:
        raise ValueError(f"unknown result status {status!r}")
    total = item.get("total")
    components: dict[str, Score] = {}
    for name, score in item["components"].items():
        if score["status"] not in STATUSES:
            raise ValueError(f"component {name!r}: unknown status {score['status']!r}")
        components[name] = Score(score.get("value"), score["status"], score.get("reason"))
    return RewardResult(None if total is None else float(total), status, components)


def results_from_json(data: Any, count: int, source: str) -> list[RewardResult]:
    """The results of a scoring answer for ``count`` rollouts, in rollout order.

    Raises:
        RewardServiceError: The answer is outside the contract (missing fields, unknown statuses, wrong count),
            naming ``source``.

    """
    try:
        raw = data["results"]
        results = [result_from_json(item) for item in sorted(raw, key=lambda item: int(item["index"]))]
        indexes = sorted(int(item["index"]) for item in raw)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RewardServiceError(f"{source} answered outside the contract ({type(exc).__name__}: {exc})") from exc
    if indexes != list(range(count)):
        raise RewardServiceError(f"{source} answered {len(indexes)} results for {count} rollouts")
    return results


def error_json(code: str, status: str, message: str, **fields: JSON) -> ErrorBody:
    """An error body: ``{"error": {code, status, message, ...fields}}``."""
    return {"error": {"code": code, "status": status, "message": message, **fields}}


def error_for(exc: BaseException) -> tuple[int, ErrorBody]:
    """The HTTP status and body answering a library exception raised while binding or scoring."""
    if isinstance(exc, RewardBatchError):
        status = "failed_precondition"
        body = error_json(
            "reward_batch_failed", status, str(exc), index=exc.index, component=exc.component, cause=exc.cause
        )
    elif isinstance(exc, DataError):
        status = "invalid_argument"
        body = error_json("invalid_rollout", status, str(exc), index=exc.index, detail=exc.detail)
    elif isinstance(exc, SpecError):
        status = "invalid_argument"
        body = error_json("invalid_spec", status, str(exc), path=exc.path or None)
    else:
        status = "internal"
        body = error_json("internal", status, "internal error while scoring")
    return HTTP_STATUS[status], body


def error_from(status: int, body: Any, fallback: str, url: str) -> EvalsiError:
    """The exception a client raises for an error answer: what local scoring would have raised, where it can.

    ``fallback`` is a short text of the answer for when its body is not an error object.
    """
    error = body.get("error") if isinstance(body, Mapping) else None
    if not isinstance(error, Mapping):
        error = {"message": str(error)} if error else {}
    code = error.get("code", "")
    message = str(error.get("message") or fallback)
    if code == "reward_batch_failed":
        return RewardBatchError(
            int(error.get("index", -1)), str(error.get("component", "?")), str(error.get("cause") or message)
        )
    if code == "invalid_rollout":
        index = None if error.get("index") is None else int(error["index"])
        detail = str(error.get("detail") or message).removeprefix(f"rollout {index}: ")
        return DataError(f"rejected by the Reward Service: {detail}", index=index)
    if code == "invalid_spec":
        return SpecError(f"rejected by the Reward Service at {url}: {message}")
    if status in (401, 403):
        # a refused field (``path``) is the spec's to fix: only the server's operator may set it
        hint = "" if error.get("path") else "; set EVALSI_TOKEN to a token with the evaluations.run permission"
        return RewardServiceError(f"the Reward Service at {url} refused the call (HTTP {status}: {message}){hint}")
    return RewardServiceError(f"the Reward Service at {url} failed (HTTP {status}: {message})")
