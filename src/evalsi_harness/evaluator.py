"""``task-checker``: score a finished agent trajectory with its task's checker, as a RunSpec or RewardSpec component.

The completion is the trajectory: chat messages (each assistant message's tool calls, or its text as one action)
or text (a JSON list of actions, or one JSON action a line). The actions are replayed in a fresh episode of the
task, the episode is submitted if the trajectory did not, and the checker's score is the value. A checker that
cannot run makes the score an ``error`` with its reason, never a 0.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

from pydantic import Field

from evalsi.errors import EvalsiError
from evalsi.evaluators import SPEC_PATH, Evaluator, Params, Score, ScoreContext, register
from evalsi.records import Record
from evalsi.sandbox import isolation_level, require
from evalsi_harness._pool import TaskEnvPool
from evalsi_harness._task import load_task
from evalsi_harness.gym import TaskEnv


class TaskCheckerParams(Params):
    """Which task grades the trajectories."""

    task: str = Field(json_schema_extra=SPEC_PATH)
    """The Task YAML file: relative to the spec file that names it (to the working directory for a spec given
    as a Python mapping or a params dict)."""
    name: str | None = None
    """The Task's name, when the file holds several."""
    min_isolation: Literal["process", "namespaced", "gvisor"] = "namespaced"
    """The lowest sandbox rung allowed; a task asking for less runs at this rung instead."""
    environments: int = Field(default=2, ge=1, le=64)
    """Episodes replayed at once (each is one warm sandbox)."""


def trajectory_actions(completion: Any) -> list[object]:
    """The actions of a trajectory, in order (see the module docstring for the forms).

    Raises:
        ValueError: Text that is neither a JSON list of actions nor JSON lines.

    """
    if isinstance(completion, list):
        actions: list[object] = []
        for message in completion:
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            calls = message.get("tool_calls") or []
            actions.extend(calls if calls else [message.get("content") or ""])
        return actions
    text = str(completion).strip()
    if not text:
        return []
    if text.startswith("["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON list of actions ({exc.msg} at {exc.pos})") from None
        if not isinstance(value, list):
            raise ValueError("a trajectory must be a JSON list of actions")
        return list(value)
    return [line for line in text.splitlines() if line.strip()]


class _Pools:
    """One environment pool per (task file, name, rung), kept for the evaluator's life."""

    def __init__(self) -> None:
        self._pools: dict[tuple[str, str | None, str, int], TaskEnvPool] = {}
        self._lock = threading.Lock()

    def get(self, params: TaskCheckerParams) -> TaskEnvPool:
        task = load_task(params.task, params.name)
        rung = task.isolation
        if isolation_level(rung) < isolation_level(params.min_isolation):
            rung = require(params.min_isolation)
        key = (params.task, params.name, rung, params.environments)
        with self._lock:
            pool = self._pools.get(key)
            if pool is None:
                pool = self._pools[key] = TaskEnvPool(replace(task, isolation=rung), params.environments)
            return pool

    def close(self) -> None:
        with self._lock:
            for pool in self._pools.values():
                pool.close()
            self._pools.clear()


@register
class TaskChecker(Evaluator[TaskCheckerParams]):
    """Replay a trajectory in a fresh episode of the task and grade its end state with the task's checker."""

    name = "task-checker"
    summary = "Replays an agent trajectory in its task's sandbox; the task's checker grades the end state."
    params_model = TaskCheckerParams
    reads = ("completion",)
    runs_code = True
    pack = "agent"
    in_process_only = True  # the task file (and a Python checker in it) is read from the host: never for a tenant

    def __init__(self) -> None:
        self._pools = _Pools()

    def score_batch(self, records: Sequence[Record], params: TaskCheckerParams, ctx: ScoreContext) -> list[Score]:
        """Replay every record's trajectory, as many at once as the pool has environments."""
        try:
            pool = self._pools.get(params)
        except (EvalsiError, OSError) as exc:
            return [Score.error(f"task {params.task!r}: {exc}") for _ in records]
        return pool.map(_replay, list(records))

    def close(self) -> None:
        """Stop every task environment."""
        self._pools.close()


def _replay(env: TaskEnv, record: Record) -> Score:
    try:
        actions = trajectory_actions(record.completion)
    except ValueError as exc:
        return Score.error(f"the completion is not a trajectory: {exc}")
    try:
        return _grade(env, actions)
    except EvalsiError as exc:  # the environment could not restore: this record's error, not the batch's
        return Score.error(str(exc))


def _grade(env: TaskEnv, actions: list[object]) -> Score:
    env.reset()
    info: dict[str, Any] = {}
    reward: float | None = None
    done = False
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            done = True
            break
    if not done:
        _, reward, _, _, info = env.step({"tool": "submit"})
    checker = info.get("checker", {})
    details = {"steps": info.get("step"), "checker": checker.get("reason", "")}
    if reward is None:
        return Score.error(f"the checker could not grade the trajectory: {checker.get('reason', 'no verdict')}")
    passed = checker.get("passed")
    value: float | bool = passed if isinstance(passed, bool) else reward
    return Score(value=value, status="ok", reason=str(checker.get("reason", "")), details=details)
