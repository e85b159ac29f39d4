"""Grading an episode's end state: the task's checker, run in the environment, gives a score or no score.

A checker that cannot run (it timed out, crashed, printed no score, the sandbox failed) gives ``score=None`` with
the reason: never 0, which would teach a policy that a broken checker means a wrong answer.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

from evalsi_harness._environment import Environment
from evalsi_harness._task import CommandChecker, Task

_TAIL = 2000


@dataclass(frozen=True)
class CheckResult:
    """The checker's verdict: ``score`` in [0, 1] (None when it could not run), pass/fail when it gave one."""

    score: float | None
    passed: bool | None
    reason: str = ""
    output: str = ""
    """The end of the checker command's stdout and stderr, for debugging a task."""

    def to_info(self) -> dict[str, Any]:
        """As plain data for ``info``."""
        return dataclasses.asdict(self)


def run_checker(task: Task, env: Environment) -> CheckResult:
    """Write the checker's files into the work dir, then run the checker there.

    Args:
        task: The task, whose checker to run.
        env: The environment holding the work dir to grade.

    """
    for path, text in task.checker_files.items():
        written = env.write_file(path, text)
        if not written.ok:
            return CheckResult(None, None, f"the checker's file {path!r} could not be written: {written.stderr[-300:]}")
    if isinstance(task.checker, CommandChecker):
        return _run_command(task.checker, task, env)
    try:
        value = task.checker(env)
    except Exception as exc:
        return CheckResult(None, None, f"the checker raised {type(exc).__name__}: {exc}")
    return _from_value(value, "the checker returned")


def _run_command(checker: CommandChecker, task: Task, env: Environment) -> CheckResult:
    limits = dataclasses.replace(task.step_limits, wall_time=checker.wall_time, cpu_time=max(1, int(checker.wall_time)))
    done = env.bash(checker.command, limits)
    output = (done.stdout[-_TAIL:] + ("\n" if done.stdout and done.stderr else "") + done.stderr[-_TAIL:]).strip()
    if done.reason != "exit":
        why = done.detail or {"timeout": f"ran past {checker.wall_time:g} s"}.get(done.reason, done.reason)
        return CheckResult(None, None, f"the checker did not finish: {why}", output)
    if checker.score == "exit":
        if done.exit_code in (0, 1):
            return CheckResult(float(done.exit_code == 0), done.exit_code == 0, f"exit status {done.exit_code}", output)
        return CheckResult(
            None, None, f"the checker exited with status {done.exit_code} (0 passes, 1 fails: it could not run)", output
        )
    if done.exit_code != 0:
        return CheckResult(None, None, f"the checker exited with status {done.exit_code}", output)
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if not lines:
        return CheckResult(None, None, "the checker printed no score", output)
    try:
        value = float(lines[-1])
    except ValueError:
        return CheckResult(None, None, f"the checker's last line {lines[-1][:80]!r} is not a number", output)
    result = _from_value(value, "the checker printed")
    return dataclasses.replace(result, output=output)


def _from_value(value: object, what: str) -> CheckResult:
    if isinstance(value, bool):
        return CheckResult(float(value), value, "passed" if value else "failed")
    if isinstance(value, numbers.Real) and math.isfinite(float(value)) and 0.0 <= float(value) <= 1.0:
        return CheckResult(float(value), None, f"score {float(value):g}")
    return CheckResult(None, None, f"{what} {value!r}; a score is a bool or a number in [0, 1]")
