"""Checkers that cannot run give no reward (None, with the reason), never 0."""

from __future__ import annotations

import pytest

from evalsi_harness import CommandChecker, Environment, TaskEnv

from .conftest import small_task


def finish(checker: object, **task_fields: object) -> tuple[float | None, dict[str, object]]:
    with TaskEnv(small_task(checker=checker, **task_fields)) as env:
        env.reset()
        _, reward, terminated, _, info = env.step({"tool": "submit"})
        assert terminated
        return reward, info["checker"]


@pytest.mark.parametrize(
    ("checker", "reason"),
    [
        (CommandChecker("python3 -c 'raise SystemExit(2)'"), "exited with status 2 (0 passes, 1 fails"),
        (CommandChecker("no-such-checker-program"), "exited with status 127"),
        (CommandChecker("kill -SEGV $$"), "did not finish"),
        (CommandChecker("sleep 30", wall_time=0.5), "did not finish: ran past 0.5 s"),
        (CommandChecker("echo 0.5; exit 1", score="stdout"), "exited with status 1"),
        (CommandChecker("echo", score="stdout"), "printed no score"),
        (CommandChecker("echo nearly", score="stdout"), "last line 'nearly' is not a number"),
        (CommandChecker("echo 1.5", score="stdout"), "printed 1.5; a score is a bool or a number in [0, 1]"),
        (CommandChecker("echo nan", score="stdout"), "a score is a bool or a number in [0, 1]"),
    ],
)
def test_a_checker_that_cannot_run_gives_none_with_the_reason(checker: CommandChecker, reason: str) -> None:
    reward, verdict = finish(checker)
    assert reward is None and verdict["score"] is None
    assert reason in str(verdict["reason"])


def test_a_crashing_python_checker_gives_none() -> None:
    def crash(env: Environment) -> float:
        raise KeyError("boom")

    reward, verdict = finish(crash)
    assert reward is None and verdict["reason"] == "the checker raised KeyError: 'boom'"


@pytest.mark.parametrize(("value", "reward"), [(True, 1.0), (False, 0.0), (0.25, 0.25), (1, 1.0)])
def test_python_checker_values(value: object, reward: float) -> None:
    assert finish(lambda env: value)[0] == reward


@pytest.mark.parametrize("value", [None, "1", 2.0, -0.1, float("inf")])
def test_python_checker_bad_values_give_none(value: object) -> None:
    reward, verdict = finish(lambda env: value)
    assert reward is None and "a score is a bool or a number in [0, 1]" in str(verdict["reason"])


def test_python_checker_grades_through_the_sandbox() -> None:
    def grade(env: Environment) -> bool:
        seen = env.bash("cat done.txt; id -u")
        return seen.stdout == "yes\n1000\n"

    with TaskEnv(small_task(checker=grade)) as env:
        env.reset()
        env.step({"tool": "write_file", "path": "done.txt", "content": "yes\n"})
        assert env.step({"tool": "submit"})[1] == 1.0


def test_hidden_checker_files_appear_only_when_the_checker_runs() -> None:
    checker = CommandChecker("grep -q secret-expectation hidden_test.txt")
    task = small_task(checker=checker, checker_files={"hidden_test.txt": "secret-expectation\n"})
    with TaskEnv(task) as env:
        env.reset()
        obs, *_ = env.step({"tool": "bash", "command": "ls -A; grep -r secret-expectation / 2>/dev/null | head -1"})
        assert "hidden_test" not in obs and "secret-expectation" not in obs
        assert env.step({"tool": "submit"})[1] == 1.0
        env.reset()
        obs, *_ = env.step({"tool": "bash", "command": "ls -A"})
        assert "hidden_test" not in obs
