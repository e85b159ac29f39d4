"""``AgentLoop``: evaluation-test rollouts that are agent episodes in a :class:`~evalsi_harness.gym.TaskEnv`.

Use it as an ``@evaluation_test``'s ``rollout_processor``: each row runs one episode of its task (``task=`` for
every row, or the row's ``task`` column), driven by the OpenAI-compatible model its ``completion_params`` name
(``model``, ``base_url``, ``api_key_env``, ``temperature``). The row's messages become the episode's chat, and
``row.metadata["reward"]`` holds the checker's reward (None when it could not run; the reason is in
``row.metadata["checker"]``), for the test to score::

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
        params = row.completion_params
        if "model" not in params or "base_url" not in params:
            row.rollout_error = f"completion_params need `model` and `base_url` for agent episodes, got {params}"
            return row
        key_env = params.get("api_key_env")
        policy = OpenAIPolicy(
            str(params["base_url"]),
            str(params["model"]),
            use_tools=self.use_tools,
            api_key=os.environ.get(str(key_env)) if key_env else None,
            temperature=params.get("temperature"),
        )
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
