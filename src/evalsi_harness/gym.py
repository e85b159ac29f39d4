"""``TaskEnv``: an agent task as a gymnasium-style environment of reset/step episodes in the sandbox.

Observations are text: the task's description after ``reset``, then each tool's result as a JSON object (a bash
command's ``exit_code``, ``stdout``, ``stderr``, ``truncated``; a file's ``content``; or an ``error``). Actions
are what an LLM writes (see :func:`evalsi_harness.parse_action`); a malformed one is an observation with the
error, and still counts as a step. ``submit``, running out of steps or past an episode limit ends the episode;
the checker grades the end state and its score is the reward (None, with ``info["checker"]["reason"]``, when it
could not run). Every other step's reward is 0. A command that kills the sandbox itself ends the episode with
reward 0 (the agent destroyed what was to be graded).

With gymnasium installed, ``TaskEnv`` is a ``gymnasium.Env`` with text spaces, registered as
``evalsi/TaskEnv-v0`` (``gymnasium.make("evalsi/TaskEnv-v0", task="task.yaml")``).

Example:
    >>> with TaskEnv("examples/agent-tasks/write-file/task.yaml") as env:
    ...     obs, info = env.reset()
    ...     obs, reward, terminated, truncated, info = env.step({"tool": "submit"})
    >>> reward, terminated  # submitted without writing the file: the checker fails it
    (0.0, True)

"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from evalsi.errors import EvalsiError
from evalsi.sandbox import RunResult
from evalsi_harness._actions import Action, ActionError, parse_action, tool_schemas
from evalsi_harness._checker import CheckResult, run_checker
from evalsi_harness._environment import Environment, Snapshot
from evalsi_harness._task import Task, load_task

__all__ = ["ENV_ID", "TaskEnv", "TaskEnvError"]

ENV_ID = "evalsi/TaskEnv-v0"
MAX_TEXT = 1 << 22
"""The longest observation or action text the declared spaces allow."""

_gymnasium: Any
if TYPE_CHECKING:
    _EnvBase = object
    _gymnasium = None
else:
    try:
        import gymnasium as _gymnasium

        _EnvBase = _gymnasium.Env
    except ImportError:  # gymnasium is optional: the same API without the base class
        _gymnasium = None
        _EnvBase = object


class TaskEnvError(EvalsiError, RuntimeError):
    """The environment cannot go on: used before ``reset``, after ``close``, or its sandbox could not restore."""


class TaskEnv(_EnvBase):
    """One environment of a task, gymnasium-style: ``reset``, ``step``, ``close``; a context manager.

    ``task`` is a :class:`Task` or the path of a Task YAML file. Setup runs once, when the environment is made,
    unless a shared ``snapshot`` of the same task is given (as :class:`~evalsi_harness.TaskEnvPool` does).

    Args:
        task: The task, or its YAML file.
        snapshot: A snapshot of the same task to share; None to set the task up for this environment alone.

    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's class attribute)

    def __init__(self, task: Task | str | Path, *, snapshot: Snapshot | None = None) -> None:
        self.task = task if isinstance(task, Task) else load_task(task)
        self._own_snapshot = snapshot is None
        self.snapshot = snapshot or Snapshot(self.task)
        try:
            self._env = Environment(self.task, self.snapshot)
        except BaseException:
            if self._own_snapshot:
                self.snapshot.close()
            raise
        self._steps = 0
        self._active = False
        self._closed = False
        self._wall = 0.0
        self._cpu = 0.0
        if _gymnasium is not None:
            self.observation_space = _gymnasium.spaces.Text(MAX_TEXT, min_length=0, charset=_CHARSET)
            self.action_space = _gymnasium.spaces.Text(MAX_TEXT, min_length=0, charset=_CHARSET)

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The actions as tools in the OpenAI ``tools`` format."""
        return tool_schemas()

    @property
    def environment(self) -> Environment:
        """The sandboxed environment episodes run in (what a Python checker receives)."""
        return self._env

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode from the snapshot; the observation is the task's description.

        ``seed`` seeds ``np_random`` under gymnasium (the task itself is deterministic); ``options`` is unused.

        Args:
            seed: Seeds ``np_random`` under gymnasium.
            options: Unused (gymnasium's signature).

        Raises:
            TaskEnvError: The environment is closed, or the work dir could not be restored.

        """
        if _gymnasium is not None:
            _gymnasium.Env.reset(self, seed=seed)
        self._require_open()
        started = time.monotonic()
        restored = self._env.restore()
        if not restored.ok:
            self._active = False
            raise TaskEnvError(f"task {self.task.name!r}: the work dir could not be restored: {_result_text(restored)}")
        self._steps, self._wall, self._cpu, self._active = 0, 0.0, 0.0, True
        info = {"task": self.task.name, "max_steps": self.task.max_steps, "tools": self.tools}
        info["reset_seconds"] = time.monotonic() - started
        return self.task.description, info

    def step(self, action: object) -> tuple[str, float | None, bool, bool, dict[str, Any]]:
        """Carry out one action; see the module docstring for what ends an episode and what the reward is.

        Args:
            action: A tool call (a mapping, an OpenAI tool call or an :class:`Action`) or its JSON text.

        Returns:
            ``(observation, reward, terminated, truncated, info)``, as gymnasium's ``step``.

        Raises:
            TaskEnvError: No episode is running (call ``reset`` first, also after one ended).

        """
        self._require_open()
        if not self._active:
            raise TaskEnvError("no episode is running: call reset() first (also after an episode ended)")
        self._steps += 1
        info: dict[str, Any] = {"step": self._steps}
        try:
            parsed = parse_action(action)
        except ActionError as exc:
            info["error"] = str(exc)
            return self._after(json.dumps({"error": str(exc)}), info)
        info["action"] = parsed.to_json()
        if parsed.tool == "submit":
            return self._finish(json.dumps({"submitted": True}), info, terminated=True)
        result, observation = self._run(parsed)
        self._wall += result.wall_time
        self._cpu += result.cpu_time
        info["result"] = {"exit_code": result.exit_code, "reason": result.reason, "wall_time": result.wall_time}
        if result.reason == "sandbox":
            return self._lost(observation, info, result)
        return self._after(observation, info)

    def _run(self, action: Action) -> tuple[RunResult, str]:
        args = action.args
        if action.tool == "bash":
            result = self._env.bash(args["command"])
            body: dict[str, Any] = {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr}
            body["truncated"] = result.stdout_truncated or result.stderr_truncated
            if result.reason != "exit":
                body["stopped"] = _STOPPED.get(result.reason, result.reason)
            return result, json.dumps(body)
        if action.tool == "read_file":
            result = self._env.read_file(args["path"])
            if result.ok:
                return result, json.dumps({"content": result.stdout, "truncated": result.stdout_truncated})
            return result, json.dumps({"error": _result_text(result) or f"cannot read {args['path']!r}"})
        result = self._env.write_file(args["path"], args["content"])
        if result.ok:
            return result, json.dumps({"written": args["path"], "chars": len(args["content"])})
        return result, json.dumps({"error": _result_text(result) or f"cannot write {args['path']!r}"})

    def _lost(
        self, observation: str, info: dict[str, Any], result: RunResult
    ) -> tuple[str, float | None, bool, bool, dict[str, Any]]:
        """The sandbox died during an action, and the work dir with it: the episode ends with nothing to grade.

        When the sandbox could not start it is the infrastructure's failure: no reward. When it died under the
        agent's own command (``kill -9 -1`` reaches the command runner), the agent destroyed its environment:
        reward 0, so that destroying the environment is never a way out of a low score.
        """
        self._active = False
        info["error"] = f"the sandbox failed during the episode: {result.detail}"
        if result.infrastructure:
            verdict = CheckResult(None, None, "the sandbox failed to start; nothing to grade")
        else:
            verdict = CheckResult(0.0, False, "the agent's command killed its sandbox; nothing left to grade")
        info["checker"] = verdict.to_info()
        return observation, verdict.score, False, True, info

    def _after(self, observation: str, info: dict[str, Any]) -> tuple[str, float | None, bool, bool, dict[str, Any]]:
        """End the episode (truncated) when steps or episode limits ran out, else go on with reward 0."""
        over = None
        if self._steps >= self.task.max_steps:
            over = f"max_steps ({self.task.max_steps}) reached"
        elif self._wall >= self.task.episode_wall_time:
            over = f"the episode's wall time ({self.task.episode_wall_time:g} s) ran out"
        elif self._cpu >= self.task.episode_cpu_time:
            over = f"the episode's CPU time ({self.task.episode_cpu_time:g} s) ran out"
        if over is None:
            return observation, 0.0, False, False, info
        info["truncated_because"] = over
        return self._finish(observation, info, terminated=False)

    def _finish(
        self, observation: str, info: dict[str, Any], *, terminated: bool
    ) -> tuple[str, float | None, bool, bool, dict[str, Any]]:
        self._active = False
        verdict = run_checker(self.task, self._env)
        info["checker"] = verdict.to_info()
        return observation, verdict.score, terminated, not terminated, info

    def _require_open(self) -> None:
        if self._closed:
            raise TaskEnvError("the environment is closed")

    def close(self) -> None:
        """Stop the sandbox (and remove the snapshot, when this environment made it)."""
        if self._closed:
            return
        self._closed = True
        self._active = False
        self._env.close()
        if self._own_snapshot:
            self.snapshot.close()

    def __enter__(self) -> TaskEnv:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


_STOPPED = {
    "timeout": "killed: ran past the step's wall time",
    "cpu": "killed: ran past the step's CPU time",
    "memory": "killed: out of memory",
    "output": "output limit reached",
    "signal": "killed by a signal",
}
_CHARSET = "".join(chr(c) for c in range(32, 127)) + "\n\t\r"


def _result_text(result: RunResult) -> str:
    return (result.stderr.strip() or result.detail or result.stdout.strip())[-1000:]


if _gymnasium is not None and ENV_ID not in _gymnasium.registry:
    _gymnasium.register(id=ENV_ID, entry_point="evalsi_harness.gym:TaskEnv")
