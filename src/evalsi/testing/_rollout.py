"""Rollout processors: how each row gets the model's reply before the test scores it.

- :class:`SingleTurn` asks an OpenAI-compatible endpoint once per row (``completion_params`` name the model,
  ``base_url`` or a provider, ``api_key_env`` and sampling settings), through the same target as ``evalsi run``.
- :class:`NoOp` takes rows as they are: their messages already end with the model's reply (pre-generated).
- :class:`Remote` hands each row to a rollout service of yours over HTTP (an agent server, say) and reads back
  the finished conversation.

A processor is ``async process(rows, max_concurrency) -> rows``; a failed rollout marks its row with
``rollout_error`` (the row scores 0 and says why) rather than failing the whole test.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Protocol

import httpx

from evalsi.runs import GenerationError, OpenAITarget
from evalsi.specs import SamplingSpec, TargetSpec
from evalsi.testing._models import MessageList
from evalsi.testing._providers import resolve
from evalsi.testing._row import EvaluationRow

_TARGET_KEYS = {"base_url", "model", "api", "api_key_env", "timeout", "max_retries", "retry_backoff", "headers"}
_SAMPLING_KEYS = {"temperature", "top_p", "max_tokens", "seed", "stop"}


class RolloutProcessor(Protocol):
    """Turns rows into rows whose messages end with the model's reply."""

    async def process(self, rows: Sequence[EvaluationRow], max_concurrency: int) -> list[EvaluationRow]:
        """Roll every row out (concurrently, at most ``max_concurrency`` at once).

        Args:
            rows: The dataset rows to roll out.
            max_concurrency: The most rollouts in flight at once.

        """
        ...


class NoOp:
    """Rows are scored as they are: their messages already hold the reply."""

    async def process(self, rows: Sequence[EvaluationRow], max_concurrency: int) -> list[EvaluationRow]:
        """The rows, unchanged.

        Args:
            rows: The dataset rows to roll out.
            max_concurrency: The most rollouts in flight at once.

        """
        return list(rows)


class SingleTurn:
    """One chat completion per row from the OpenAI-compatible endpoint its ``completion_params`` name.

    ``completion_params`` keys: ``model`` and ``base_url`` (or a ``PROVIDER/NAME`` model whose provider is
    configured: :mod:`evalsi.testing._providers`), ``api_key_env``, ``timeout``, ``max_retries``, ``headers``;
    sampling ``temperature``, ``top_p``, ``max_tokens``, ``seed``, ``stop``; any other key is sent in the request
    body as it is.
    """

    async def process(self, rows: Sequence[EvaluationRow], max_concurrency: int) -> list[EvaluationRow]:
        """Ask the endpoint for each row's reply and append it to the row's messages.

        Args:
            rows: The dataset rows to roll out.
            max_concurrency: The most rollouts in flight at once.

        """
        targets: dict[str, OpenAITarget] = {}
        try:
            slots = asyncio.Semaphore(max_concurrency)

            async def one(row: EvaluationRow) -> EvaluationRow:
                key = repr(sorted(row.completion_params.items()))
                target = targets.get(key)
                if target is None:
                    target = targets[key] = _target(row.completion_params, max_concurrency)
                async with slots:
                    started = time.perf_counter()
                    try:
                        generation = (await target.generate([dict(m) for m in row.messages], 1))[0]
                    except GenerationError as exc:
                        row.rollout_error = str(exc)
                        return row
                row.messages.append({"role": "assistant", "content": generation.text})
                row.latency = time.perf_counter() - started
                row.tokens = generation.tokens
                return row

            return list(await asyncio.gather(*(one(r) for r in rows)))
        finally:
            for target in targets.values():
                await target.aclose()


def _target(params: dict[str, Any], max_concurrency: int) -> OpenAITarget:
    """The endpoint target for one set of completion params.

    A ``PROVIDER/NAME`` model without ``base_url`` reaches its provider's endpoint (:mod:`evalsi.testing._providers`).

    Raises:
        EvaluationSetupError: ``model`` is missing, or neither ``base_url`` nor a known provider says where it is.
        ValueError: A value is invalid (pydantic's message).

    """
    params = resolve(params)
    target = {k: v for k, v in params.items() if k in _TARGET_KEYS}
    sampling = {k: v for k, v in params.items() if k in _SAMPLING_KEYS}
    extra = {k: v for k, v in params.items() if k not in _TARGET_KEYS | _SAMPLING_KEYS}
    spec = TargetSpec.model_validate({**target, "max_concurrency": max_concurrency})
    return OpenAITarget(spec, SamplingSpec.model_validate({**sampling, "extra": extra}))


SingleTurnRolloutProcessor = SingleTurn
"""Eval Protocol's name of :class:`SingleTurn`, so a test written for it runs with only its import changed."""
NoOpRolloutProcessor = NoOp
"""Eval Protocol's name of :class:`NoOp`."""


class Remote:
    """Rollouts run by a service of yours: ``POST {base_url}/rollouts`` per row, then polling until done.

    The request carries ``{"rollout_id", "messages", "completion_params", "metadata"}``. The service answers
    ``{"status": "done", "messages": [...]}`` at once, or ``{"status": "running"}``; then
    ``GET {base_url}/rollouts/{rollout_id}`` is polled every ``poll_interval`` seconds until ``done`` (or
    ``failed`` with an ``error``), for at most ``timeout`` seconds.
    """

    def __init__(self, base_url: str, *, poll_interval: float = 0.5, timeout: float = 300.0) -> None:
        """Point at a rollout service.

        Args:
            base_url: The service's base URL.
            poll_interval: Seconds between status polls.
            timeout: Seconds one rollout may take.

        """
        self.base_url = base_url.rstrip("/")
        self.poll_interval = poll_interval
        self.timeout = timeout

    async def process(self, rows: Sequence[EvaluationRow], max_concurrency: int) -> list[EvaluationRow]:
        """Start each row's rollout on the service and wait for its conversation.

        Args:
            rows: The dataset rows to roll out.
            max_concurrency: The most rollouts in flight at once.

        """
        slots = asyncio.Semaphore(max_concurrency)
        async with httpx.AsyncClient(timeout=30.0) as client:

            async def one(index: int, row: EvaluationRow) -> EvaluationRow:
                async with slots:
                    started = time.perf_counter()
                    try:
                        row.messages = MessageList(await self._roll(client, f"{row.row_id}-{row.run}-{index}", row))
                    except (httpx.HTTPError, ValueError, TimeoutError) as exc:
                        row.rollout_error = f"remote rollout failed: {exc}"
                    row.latency = time.perf_counter() - started
                    return row

            return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(rows))))

    async def _roll(self, client: httpx.AsyncClient, rollout_id: str, row: EvaluationRow) -> list[dict[str, Any]]:
        body = {
            "rollout_id": rollout_id,
            "messages": row.messages,
            "completion_params": row.completion_params,
            "metadata": {"row_id": row.row_id, "run": row.run, **row.metadata},
        }
        response = await client.post(f"{self.base_url}/rollouts", json=body)
        response.raise_for_status()
        deadline = time.monotonic() + self.timeout
        answer = response.json()
        while answer.get("status") == "running":
            if time.monotonic() > deadline:
                raise TimeoutError(f"rollout {rollout_id} did not finish within {self.timeout:g} s")
            await asyncio.sleep(self.poll_interval)
            response = await client.get(f"{self.base_url}/rollouts/{rollout_id}")
            response.raise_for_status()
            answer = response.json()
        if answer.get("status") != "done":
            raise ValueError(f"rollout {rollout_id}: {answer.get('error') or answer.get('status')!r}")
        messages = answer.get("messages")
        if not isinstance(messages, list):
            raise ValueError(f"rollout {rollout_id}: the answer has no `messages` list")
        return messages
