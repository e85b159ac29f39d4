"""The ``server=`` client: score a batch through the evalsi server's Reward Service, one HTTP request per call.

The HTTP contract (``POST {server}/v1alpha1/rewards:score``; the evalsi server implements it):

Request body (JSON)::

    {"spec": <RewardSpec resource mapping: apiVersion, kind, metadata, spec>,
     "rollouts": [<rollout mapping>, ...]}

Headers: ``Content-Type: application/json``, and ``Authorization: Bearer $EVALSI_TOKEN`` when that variable
(or ``token=``) is set.

Response ``200``: one result per rollout (``index`` is the rollout's position in the request), and errors (any
non-2xx), in the JSON forms of :mod:`evalsi.rewards.wire`:

- ``422`` ``reward_batch_failed`` with ``index``, ``component``, ``cause``: a component errored under
  ``onError: raise``; the client raises :class:`~evalsi.errors.RewardBatchError` as local scoring would.
- ``400`` ``invalid_spec`` / ``invalid_rollout`` (with ``index`` and ``detail``, the message without the index):
  raised as ``SpecError`` / ``DataError``.
- ``401`` / ``403``: raised as :class:`RewardServiceError` naming ``EVALSI_TOKEN``.
- The statuses of :data:`evalsi._util.retry.RETRY_STATUSES` (429 and 5xx among them), timeouts and connection
  failures are retried (``retries`` further attempts, 0.5 s backoff doubling, ``Retry-After`` honoured), then
  raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx
import orjson
from pydantic import ValidationError

from evalsi._util.retry import attempts_phrase
from evalsi._util.retry_transports import server_client
from evalsi.errors import EvalsiError, RewardServiceError
from evalsi.rewards._batch import plain
from evalsi.rewards._compose import ComponentRule, RewardResult
from evalsi.rewards.wire import error_from, results_from_json
from evalsi.specs import API_VERSION, Resource, RewardSpecBody, load_resources
from evalsi.specs._resource import document_from_mapping, parse_resources, select_resource

SCORE_PATH = "/v1alpha1/rewards:score"
BACKOFF = 0.5
"""Seconds before the first retry, doubling each time."""


class RemoteReward:
    """A RewardSpec scored by an evalsi server: ``score(rollouts)`` returns what ``Reward.score`` would.

    The spec is validated here (so a typo fails at start-up, with file and line), but its evaluators are
    resolved on the server, which may hold evaluators or judges this process does not.
    """

    def __init__(
        self,
        server: str,
        resource: Mapping[str, Any],
        body: RewardSpecBody,
        *,
        token: str | None = None,
        timeout: float = 600.0,
        retries: int = 3,
    ) -> None:
        """Bind a spec to the server that scores it (see :meth:`from_file`).

        Args:
            server: The server's base URL.
            resource: The RewardSpec resource, sent as written.
            body: The parsed spec, for composing locally what the server returns.
            token: The bearer token; None sends none.
            timeout: Seconds one request may take.
            retries: Attempts after a failed connection or a retryable status.

        """
        self.server = server.rstrip("/")
        self.url = self.server + SCORE_PATH
        self.resource = dict(resource)
        self.name = str(self.resource["metadata"]["name"])
        self.rules = [
            ComponentRule(c.display_name, c.weight, c.gate, c.threshold, c.on_error or body.on_error)
            for c in body.components
        ]
        self.retries = retries
        # Calls past the server's max_inflight wait there (back-pressure), so the read timeout is long.
        self._client = server_client(token, timeout, retries, BACKOFF)

    source: str | None = None
    """The spec file this reward was read from, if any (set by :meth:`from_file`)."""

    @property
    def component_names(self) -> list[str]:
        """Component names in spec order."""
        return [rule.name for rule in self.rules]

    def to_resource(self) -> dict[str, Any]:
        """The RewardSpec as the resource mapping sent to the server."""
        return dict(self.resource)

    @classmethod
    def from_file(cls, path: str | Path, server: str, name: str | None = None, **options: Any) -> RemoteReward:
        """Read and validate the RewardSpec in a YAML file; it is sent as written.

        Args:
            path: The YAML file.
            server: The server's base URL.
            name: Which RewardSpec when the file holds several.
            **options: ``token``, ``timeout`` and ``retries``, as for the constructor.

        """
        resource = select_resource(load_resources(path), "RewardSpec", name, str(path))
        remote = cls(server, resource.document.data, _validate(resource), **options)
        remote.source = str(path)
        return remote

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], server: str, **options: Any) -> RemoteReward:
        """From a mapping: a whole resource, or just its ``spec`` (named ``reward``, as ``from_mapping`` does).

        Args:
            data: A RewardSpec resource or its ``spec``.
            server: The server's base URL.
            **options: ``token``, ``timeout`` and ``retries``, as for the constructor.

        """
        raw = dict(data)
        if "apiVersion" not in raw:
            raw = {"apiVersion": API_VERSION, "kind": "RewardSpec", "metadata": {"name": "reward"}, "spec": raw}
        resource = select_resource(parse_resources([document_from_mapping(raw)]), "RewardSpec", None, None)
        return cls(server, raw, _validate(resource), **options)

    @classmethod
    def from_spec(cls, name: str, body: RewardSpecBody, server: str, **options: Any) -> RemoteReward:
        """From an already parsed spec (e.g. a loaded ``Reward``'s ``spec``).

        Args:
            name: The spec's name.
            body: The parsed spec.
            server: The server's base URL.
            **options: ``token``, ``timeout`` and ``retries``, as for the constructor.

        """
        resource = {
            "apiVersion": API_VERSION,
            "kind": "RewardSpec",
            "metadata": {"name": name},
            "spec": body.model_dump(mode="json", by_alias=True, exclude_defaults=True),
        }
        return cls(server, resource, body, **options)

    def score(self, rollouts: Iterable[Mapping[str, Any]]) -> list[RewardResult]:
        """Score a batch in one request; the batch completes or fails whole, as with local scoring.

        Args:
            rollouts: Rollout mappings (``prompt``, ``completion``, a reference...).

        Raises:
            RewardBatchError: A component errored under ``onError: raise`` on the server.
            DataError: The server rejected a rollout (names its index).
            RewardServiceError: The server is unreachable, refused the token, or broke the contract.

        """
        batch = [dict(r) for r in rollouts]
        if not batch:
            return []
        body = orjson.dumps(
            {"spec": self.resource, "rollouts": batch},
            default=_fallback,
            option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS,
        )
        response = self._post(body)
        return self._results(response, len(batch))

    def _post(self, body: bytes) -> httpx.Response:
        try:
            return self._client.post(self.url, content=body)
        except httpx.TransportError as exc:
            raise RewardServiceError(
                f"cannot reach the Reward Service at {self.url} (after {attempts_phrase(self.retries + 1)}): {exc}"
            ) from exc

    def _results(self, response: httpx.Response, count: int) -> list[RewardResult]:
        if response.status_code >= 300:
            raise _error_from(response, self.url)
        try:
            data = orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise RewardServiceError(f"{self.url} answered outside the contract (the body is not JSON)") from exc
        results = results_from_json(data, count, self.url)
        names = set(self.component_names)
        for index, result in enumerate(results):
            if set(result.components) != names:
                raise RewardServiceError(
                    f"{self.url}: rollout {index} has components {sorted(result.components)}, expected {sorted(names)}"
                )
        return results

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def __repr__(self) -> str:
        return f"RemoteReward({self.name!r}, server={self.server!r})"


def _validate(resource: Resource) -> RewardSpecBody:
    try:
        return RewardSpecBody.model_validate(resource.spec)
    except ValidationError as exc:
        raise resource.validation_error(exc) from None


def _fallback(value: Any) -> Any:
    converted = plain(value)
    if converted is value:
        return str(value)
    return converted


def _error_from(response: httpx.Response, url: str) -> EvalsiError:
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        body = None
    return error_from(response.status_code, body, response.reason_phrase or "no message", url)
