"""The Run Service, once for every protocol: store runs, read them back, compare two of them record by record.

Requests and answers are the proto messages in their JSON form (``camelCase`` keys), so HTTP JSON serves them
as they are and gRPC and Connect convert their messages to and from them. Comparison is the library's own
(:func:`evalsi.runs.compare_runs` and the regression gates of :mod:`evalsi.stats`), run on the stored records.
Database work runs off the event loop. Every call needs ``evaluations.run`` (checked by the transport's method table
before the call); a project sees only its own runs.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from typing import Any

from evalsi.errors import DataError
from evalsi.runs import compare_runs
from evalsi.runs._compare import comparison_to_dict
from evalsi.runs._curve import failed_rules
from evalsi.server._errors import ServiceError
from evalsi.server._metrics import Metrics
from evalsi.server._quota_store import StorageQuotas
from evalsi.server._tokens import Principal
from evalsi.server._trust import check_depth
from evalsi.server.rewards._service import RewardService
from evalsi.server.runs._check import check_results
from evalsi.server.runs._requests import check_request_id
from evalsi.server.runs._store import RunStore, check_labels, page_size
from evalsi.stats import RegressionRule

RECORDS_PAGE = (500, 5000)
"""Default and largest number of records in one ``GetRun`` page."""
RUNS_PAGE = (100, 1000)
"""Default and largest number of runs in one ``ListRuns`` page."""


class RunService:
    """Runs of the token's project; shares authentication, draining and metrics with the Reward Service."""

    def __init__(self, rewards: RewardService) -> None:
        self.rewards = rewards
        self.store = RunStore(rewards.tokens.engine, StorageQuotas(rewards.config))

    @property
    def metrics(self) -> Metrics:
        """The server's metrics (the Run Service's are ``evalsi_run_*``)."""
        return self.rewards.metrics

    async def authenticate(self, authorization: str | None) -> Principal:
        """The caller, from an ``Authorization: Bearer <token>`` value (as the Reward Service checks it)."""
        return await self.rewards.authenticate(authorization)

    async def create(self, principal: Principal, body: Mapping[str, Any]) -> dict[str, Any]:
        """``CreateRun``: store ``body["results"]`` with ``body["labels"]``; the stored ``Run``.

        With ``body["requestId"]``, a repeat of the same request returns the run the first one stored.
        """
        document = body.get("results")
        labels = check_labels(body.get("labels"))
        request_id = check_request_id(body.get("requestId"))
        check_depth(document, "results")
        document = await asyncio.to_thread(check_results, document)
        stored = await asyncio.to_thread(self.store.create, principal.project, document, labels, request_id)
        if stored.replayed:
            self.metrics.run_replays.inc()
        return stored.to_json()

    async def get(
        self, principal: Principal, run_id: str, include_records: bool = False, size: Any = None, token: str = ""
    ) -> dict[str, Any]:
        """``GetRun``: the run, and with ``include_records`` one page of its records."""
        count = page_size(size, *RECORDS_PAGE)
        stored = await asyncio.to_thread(self.store.get, principal.project, run_id)
        answer: dict[str, Any] = {"run": stored.to_json()}
        if include_records:
            records, next_token = await asyncio.to_thread(self.store.records, principal.project, run_id, count, token)
            answer["records"] = records
            if next_token:
                answer["nextPageToken"] = next_token
        return answer

    async def list_runs(
        self, principal: Principal, labels: Mapping[str, str], size: Any = None, token: str = ""
    ) -> dict[str, Any]:
        """``ListRuns``: the project's runs with every label in ``labels``, newest first, one page."""
        wanted = check_labels(labels)
        count = page_size(size, *RUNS_PAGE)
        found, next_token = await asyncio.to_thread(self.store.find, principal.project, wanted, count, token)
        answer: dict[str, Any] = {"runs": [run.to_json() for run in found]}
        if next_token:
            answer["nextPageToken"] = next_token
        return answer

    async def delete(self, principal: Principal, run_id: str) -> dict[str, Any]:
        """``DeleteRun``: delete a run of the token's project (``evaluations.run``, as ``CreateRun`` needs)."""
        await asyncio.to_thread(self.store.delete, principal.project, run_id)
        return {"id": run_id}

    async def compare(self, principal: Principal, body: Mapping[str, Any]) -> dict[str, Any]:
        """``CompareRuns``: the candidate against the base, per metric, with the regression gates' verdict."""
        base_id, candidate_id = _text(body, "baseRunId"), _text(body, "candidateRunId")
        metrics = _texts(body, "metrics")
        rules = []
        for index, text in enumerate(_texts(body, "regression")):
            try:
                rules.append(RegressionRule.parse(text))
            except ValueError as exc:
                raise ServiceError("invalid_argument", f"`regression[{index}]`: {exc}", path="regression") from None
        project, runs = principal.project, (base_id, candidate_id)
        size = await asyncio.to_thread(lambda: sum(self.store.stored_bytes(project, run) for run in runs))
        limit = self.rewards.config.spec.runs.max_compare_bytes
        if size > limit:
            raise ServiceError(
                "resource_exhausted",
                f"the two runs hold {size} stored bytes, over runs.max_compare_bytes={limit}; compare runs of "
                "fewer records",
                "compare_too_large",
                limit=limit,
            )
        # the runs' scores are read while their stored bytes are held in the project's share (a caller that goes
        # away leaves them held until the reading thread is done)
        held = await self.rewards.compared_bytes.enter(project, size)
        work = asyncio.get_running_loop().run_in_executor(
            None, self._compare, project, base_id, candidate_id, metrics, rules
        )
        try:
            return await asyncio.shield(work)
        finally:
            if work.done():
                held.release()
            else:
                work.add_done_callback(lambda _: held.release())

    def _compare(
        self, project: str, base_id: str, candidate_id: str, metrics: list[str], rules: list[RegressionRule]
    ) -> dict[str, Any]:
        base = self.store.scores(project, base_id)
        candidate = self.store.scores(project, candidate_id)
        wanted = [*metrics, *(r.metric for r in rules if metrics and r.metric not in metrics)]
        try:
            compared = compare_runs(base, candidate, wanted or None)
        except DataError as exc:
            raise ServiceError("invalid_argument", str(exc), path="metrics") from None
        by_metric = {c.metric: c for c in compared}
        for rule in rules:
            if rule.metric not in by_metric:
                raise ServiceError(
                    "invalid_argument",
                    f"`regression`: the runs share no metric {rule.metric!r} (they share: {', '.join(by_metric)})",
                    path="regression",
                )
        failed = failed_rules({m: c.comparison for m, c in by_metric.items()}, rules)
        gated = {r.metric for r in rules}
        rows = []
        for item in compared:
            row = _finite(comparison_to_dict(item))
            if item.metric in gated:
                row["regressed"] = any(r.metric == item.metric for r in failed)
            rows.append(row)
        return {
            "baseRunId": base_id,
            "candidateRunId": candidate_id,
            "comparisons": rows,
            "regressed": bool(failed),
            "regressions": [str(r) for r in failed],
        }


def _text(body: Mapping[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value:
        raise ServiceError("invalid_argument", f"`{field}` must be a run id", path=field)
    return value


def _texts(body: Mapping[str, Any], field: str) -> list[str]:
    value = body.get(field) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ServiceError("invalid_argument", f"`{field}` must be a list of strings", path=field)
    return list(value)


def _finite(value: Any) -> Any:
    """``value`` with every NaN as None (JSON has no NaN; an unset optional field in the proto form)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
