"""``AgentLoop``: evaluation-test rollouts that are agent episodes in a :class:`~evalsi_harness.gym.TaskEnv`.

Use it as an ``@evaluation_test``'s ``rollout_processor``: each row runs one episode of its task (``task=`` for
every row, or the row's ``task`` column), driven by the OpenAI-compatible model its ``completion_params`` name,
with the keys :class:`~evalsi.testing.SingleTurn` takes: ``model`` and ``base_url`` (required), ``api_key_env``,
``headers``, ``timeout``, ``max_retries``, ``retry_backoff``; sampling ``temperature``, ``top_p``, ``max_tokens``,
``seed``, ``stop``; any other key is sent in every request body as it is. Each of the episode's requests is one
chat completion with these settings, retried as evalsi's other HTTP clients are. The row's messages become the
episode's chat, and ``row.metadata["reward"]`` holds the checker's reward (None when it could not run; the reason
is in ``row.metadata["checker"]``), for the test to score::

    @evaluation_test(input_rows=[{"prompt": "write-file", "task": "tasks/write-file.yaml"}],
                     completion_params=[{"model": "m", "base_url": URL}], rollout_processor=AgentLoop())
    def test_agent(row: EvaluationRow) -> EvaluationRow:
        row.score = row.metadata["reward"] or 0.0
        return row

Episodes run on worker threads, at most ``max_concurrency`` at once, each in its own sandbox.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalsi.runs import GenerationError
from evalsi.specs import SamplingSpec, TargetSpec
from evalsi.testing import EvaluationRow
from evalsi_harness._agent import SYSTEM_PROMPT, OpenAIPolicy, run_episode
from evalsi_harness._task import Task
from evalsi_harness.gym import TaskEnv


class AgentLoop:
    """Rolls each row out as an agent episode of its task (see the module doc)."""

    def __init__(
        self, task: str | Path | Task | None = None, *, use_tools: bool = True, system: str = SYSTEM_PROMPT
    ) -> None:
        self.task = task
        self.use_tools = use_tools
        self.system = system

    async def process(self, rows: Sequence[EvaluationRow], max_concurrency: int) -> list[EvaluationRow]:
        """Run every row's episode; a row whose episode cannot run gets ``rollout_error`` (it scores 0)."""
        slots = asyncio.Semaphore(max_concurrency)

        async def one(row: EvaluationRow) -> EvaluationRow:
            async with slots:
                return await asyncio.to_thread(self._episode, row)

        return list(await asyncio.gather(*(one(row) for row in rows)))

    def _episode(self, row: EvaluationRow) -> EvaluationRow:
        task = self.task if self.task is not None else row.metadata.get("task")
        if task is None:
            row.rollout_error = "no task: give AgentLoop(task=...) or a `task` column in the row"
            return row
        try:
            policy = policy_from_params(row.completion_params, use_tools=self.use_tools)
        except (ValueError, GenerationError) as exc:
            row.rollout_error = str(exc)
            return row
        started = time.perf_counter()
        try:
            with TaskEnv(task if isinstance(task, Task) else Path(str(task))) as env:
                episode = run_episode(env, policy, system=self.system)
        except Exception as exc:  # a task that cannot load or a model that cannot answer: this row's failure
            row.rollout_error = f"{type(exc).__name__}: {exc}"
            return row
        finally:
            policy.close()
        row.messages = episode.messages
        row.latency = time.perf_counter() - started
        checker: Any = episode.info.get("checker")
        row.metadata.update(reward=episode.reward, steps=episode.steps, truncated=episode.truncated, checker=checker)
        return row


_TARGET_KEYS = {"base_url", "model", "api", "api_key_env", "timeout", "max_retries", "retry_backoff", "headers"}
_SAMPLING_KEYS = {"temperature", "top_p", "max_tokens", "seed", "stop"}


def policy_from_params(params: Mapping[str, Any], *, use_tools: bool = True) -> OpenAIPolicy:
    """The policy a row's ``completion_params`` name (the keys of the module doc).

    Raises:
        ValueError: ``model`` or ``base_url`` is missing, a value is invalid (pydantic's message names the field),
            or ``api`` is not ``chat`` (an agent converses).
        GenerationError: ``api_key_env`` names a variable that is not set.

    """
    if "model" not in params or "base_url" not in params:
        raise ValueError(f"completion_params need `model` and `base_url` for agent episodes, got {dict(params)}")
    target = TargetSpec.model_validate({k: v for k, v in params.items() if k in _TARGET_KEYS})
    extra = {k: v for k, v in params.items() if k not in _TARGET_KEYS | _SAMPLING_KEYS}
    sampling = SamplingSpec.model_validate({**{k: v for k, v in params.items() if k in _SAMPLING_KEYS}, "extra": extra})
    if target.api != "chat":
        raise ValueError(f"agent episodes need the chat API: completion_params api is {target.api!r}")
    api_key = None
    if target.api_key_env is not None:
        api_key = os.environ.get(target.api_key_env)
        if not api_key:
            raise GenerationError(f"completion_params api_key_env names {target.api_key_env!r}, which is not set")
    return OpenAIPolicy(
        str(target.base_url),
        str(target.model),
        api_key=api_key,
        use_tools=use_tools,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_tokens=sampling.max_tokens,
        seed=sampling.seed,
        stop=sampling.stop,
        extra_body=sampling.extra,
        headers=target.headers,
        timeout=target.timeout,
        max_retries=target.max_retries,
        retry_backoff=target.retry_backoff,
    )
