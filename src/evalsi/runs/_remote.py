"""A client of the evalsi server's Run Service over HTTP JSON: store runs, find them by label, compare them.

Routes (the server documents them in its proto): ``POST /v1alpha1/runs``, ``GET /v1alpha1/runs/{id}``,
``GET /v1alpha1/runs?label=KEY=VALUE``, ``POST /v1alpha1/runs:compare``, ``DELETE /v1alpha1/runs/{id}``. The
token is ``token=`` or ``$EVALSI_TOKEN`` (``Authorization: Bearer ...``), and answers in
:data:`evalsi._util.retry.RETRY_STATUSES`, timeouts and lost connections are retried as every evalsi client
retries them. Each :meth:`RunsClient.create_run` sends a fresh ``requestId`` (the same on its retries), so a retry
whose first attempt was stored stores nothing.

Example:
    >>> client = RunsClient("http://127.0.0.1:8000", token="evalsi_...")
    >>> client.url("/v1alpha1/runs")
    'http://127.0.0.1:8000/v1alpha1/runs'

"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson

from evalsi._util.retry import attempts_phrase
from evalsi._util.retry_transports import server_client
from evalsi.errors import DataError, EvalsiError
from evalsi.runs._compare import MetricComparison, comparison_from_dict
from evalsi.runs._results import read_results

RUNS_PATH = "/v1alpha1/runs"
COMPARE_PATH = "/v1alpha1/runs:compare"
BACKOFF = 0.5
"""Seconds before the first retry, doubling each time."""


class RunServiceError(EvalsiError):
    """The Run Service is unreachable, refused the call, or answered outside its contract."""


class RunNotFoundError(RunServiceError):
    """The server holds no such run for the token's project."""


class RunsClient:
    """The Run Service of an evalsi server at ``server`` (its base URL).

    Args:
        server: The server's base URL.
        token: The bearer token; ``$EVALSI_TOKEN`` when None.
        timeout: Seconds each request may take.
        retries: How many times a failed request is retried.

    """

    def __init__(self, server: str, *, token: str | None = None, timeout: float = 120.0, retries: int = 3) -> None:
        self.server = server.rstrip("/")
        self.retries = retries
        self._client = server_client(token, timeout, retries, BACKOFF)

    def url(self, path: str) -> str:
        """The full URL of a route.

        Args:
            path: The route, such as ``/v1alpha1/runs``.

        """
        return self.server + path

    def _call(self, method: str, path: str, *, body: Any = None, params: Any = None) -> dict[str, Any]:
        url = self.url(path)
        content = None if body is None else orjson.dumps(body, default=str)
        try:
            response = self._client.request(method, url, content=content, params=params)
        except httpx.TransportError as exc:
            raise RunServiceError(
                f"cannot reach the Run Service at {url} (after {attempts_phrase(self.retries + 1)}): {exc}"
            ) from exc
        try:
            data = orjson.loads(response.content) if response.content else {}
        except orjson.JSONDecodeError:
            data = None
        if response.status_code >= 300:
            raise _error(response.status_code, data, url)
        if not isinstance(data, dict):
            raise RunServiceError(f"{url} answered outside the contract (the body is not a JSON object)")
        return data

    def create_run(
        self, results: Mapping[str, Any], labels: Mapping[str, str] | None = None, *, request_id: str | None = None
    ) -> dict[str, Any]:
        """Store a results document (as ``evalsi run`` writes it) with labels; the stored run (``id`` first).

        ``request_id`` (default: a new UUID) names this create: every retry sends it, so the server stores the
        run once; pass your own to make a create safe to repeat across processes.

        Args:
            results: The results document.
            labels: Labels to find the run by.
            request_id: What makes retries of this create store one run.

        Raises:
            DataError: The server rejected the document (the message says why).
            RunServiceError: The server is unreachable, refused the token or failed.

        """
        body = {
            "results": dict(results),
            "labels": dict(labels or {}),
            "requestId": request_id if request_id is not None else str(uuid.uuid4()),
        }
        return self._call("POST", RUNS_PATH, body=body)

    def upload(
        self, path: str | Path, labels: Mapping[str, str] | None = None, *, request_id: str | None = None
    ) -> dict[str, Any]:
        """Store a results file with labels; the stored run.

        Args:
            path: The results file.
            labels: Labels to find the run by.
            request_id: As for :meth:`create_run`.

        Raises:
            DataError: The file is not a readable results file, or the server rejected it.
            RunServiceError: The server is unreachable, refused the token or failed.

        """
        return self.create_run(read_results(path), labels, request_id=request_id)

    def get_run(self, run_id: str) -> dict[str, Any]:
        """A run's header: name, labels, status, spec, target, summary, details.

        Args:
            run_id: The run's id.

        Raises:
            RunNotFoundError: The project holds no such run.

        """
        run: dict[str, Any] = self._call("GET", f"{RUNS_PATH}/{run_id}")["run"]
        return run

    def records(self, run_id: str, page_size: int = 500) -> Iterator[dict[str, Any]]:
        """Every record of a run, in dataset order, a page at a time.

        Args:
            run_id: The run's id.
            page_size: Records asked for per request.

        """
        token = ""
        while True:
            params = {"records": "true", "pageSize": page_size, **({"pageToken": token} if token else {})}
            answer = self._call("GET", f"{RUNS_PATH}/{run_id}", params=params)
            yield from answer.get("records") or []
            token = str(answer.get("nextPageToken") or "")
            if not token:
                return

    def document(self, run_id: str) -> dict[str, Any]:
        """The run as a results document again (header and every record).

        Args:
            run_id: The run's id.

        """
        run = self.get_run(run_id)
        return {
            "version": 1,
            "kind": "RunResults",
            "name": run["name"],
            "status": run.get("status", "complete"),
            "spec": run.get("spec") or {},
            "target": run.get("target") or {},
            **(run.get("details") or {}),
            "summary": run.get("summary") or {},
            "records": list(self.records(run_id)),
        }

    def list_runs(self, labels: Mapping[str, str] | None = None, page_size: int = 100) -> list[dict[str, Any]]:
        """Every run of the token's project carrying all ``labels``, newest first.

        Args:
            labels: Labels a run must carry (all of them); None for every run.
            page_size: Runs asked for per request.

        """
        found: list[dict[str, Any]] = []
        token = ""
        selector = [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        while True:
            params = [*selector, ("pageSize", str(page_size)), *([("pageToken", token)] if token else [])]
            answer = self._call("GET", RUNS_PATH, params=params)
            found.extend(answer.get("runs") or [])
            token = str(answer.get("nextPageToken") or "")
            if not token:
                return found

    def latest_run(self, labels: Mapping[str, str]) -> dict[str, Any] | None:
        """The newest run carrying all ``labels``, or None.

        Args:
            labels: Labels the run must carry (all of them).

        """
        params = [*(("label", f"{k}={v}") for k, v in labels.items()), ("pageSize", "1")]
        runs = self._call("GET", RUNS_PATH, params=params).get("runs") or []
        return dict(runs[0]) if runs else None

    def delete_run(self, run_id: str) -> None:
        """Delete a run of the token's project, with its labels and records.

        Args:
            run_id: The run's id.

        Raises:
            RunNotFoundError: The project holds no such run (a retry whose first attempt deleted it ends here too).

        """
        self._call("DELETE", f"{RUNS_PATH}/{quote(run_id, safe='')}")

    def compare_runs(
        self, base_id: str, candidate_id: str, metrics: Sequence[str] = (), regression: Sequence[str] = ()
    ) -> dict[str, Any]:
        """``CompareRuns``: the candidate against the base (JSON answer: comparisons, regressed, regressions).

        Args:
            base_id: Run A's id.
            candidate_id: Run B's id.
            metrics: The metrics to compare; every shared one when empty.
            regression: Regression gates, ``METRIC[:MAX_DROP]``.

        """
        body = {
            "baseRunId": base_id,
            "candidateRunId": candidate_id,
            "metrics": list(metrics),
            "regression": list(regression),
        }
        return self._call("POST", COMPARE_PATH, body=body)

    def comparisons(
        self, base_id: str, candidate_id: str, metrics: Sequence[str] = (), regression: Sequence[str] = ()
    ) -> tuple[list[MetricComparison], list[str]]:
        """The server's paired comparisons as :class:`MetricComparison`, and the regression gates that failed.

        Args:
            base_id: Run A's id.
            candidate_id: Run B's id.
            metrics: The metrics to compare; every shared one when empty.
            regression: Regression gates, ``METRIC[:MAX_DROP]``.

        Raises:
            RunServiceError: The server refused, or answered outside the contract.

        """
        answer = self.compare_runs(base_id, candidate_id, metrics, regression)
        try:
            compared = [comparison_from_dict(row) for row in answer.get("comparisons") or []]
        except DataError as exc:
            raise RunServiceError(f"{self.url(COMPARE_PATH)} answered outside the contract: {exc}") from None
        return compared, [str(r) for r in answer.get("regressions") or []]

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def __enter__(self) -> RunsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _error(status: int, body: Any, url: str) -> EvalsiError:
    error = body.get("error") if isinstance(body, Mapping) else None
    message = str(error.get("message")) if isinstance(error, Mapping) else f"HTTP {status}"
    if status == 404:
        return RunNotFoundError(f"the Run Service at {url}: {message}")
    if status in (401, 403):
        return RunServiceError(
            f"the Run Service at {url} refused the call (HTTP {status}: {message}); set EVALSI_TOKEN to a token "
            "with the evaluations.run permission"
        )
    if status == 400:
        return DataError(f"rejected by the Run Service at {url}: {message}")
    return RunServiceError(f"the Run Service at {url} failed (HTTP {status}: {message})")
