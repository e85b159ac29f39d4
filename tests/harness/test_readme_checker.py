"""The manual's Python checker is a working checker: named by a task file, it grades episodes as the manual says."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsi_harness import ScriptedPolicy, TaskEnv, run_episode
from tests.helpers.manual import blocks

TASK = """\
apiVersion: evals.si/v1alpha1
kind: Task
metadata: {name: write-greeting}
spec:
  description: "Create greeting.txt whose only line is: hello, world"
  checker: {callable: checks.py:grade}
  maxSteps: 4
"""


def readme_checker() -> str:
    return next(b for b in blocks("python") if "def grade(env" in b)


@pytest.mark.parametrize(("content", "reward"), [("hello, world\n", 1.0), ("hi\n", 0.0)])
def test_the_readme_checker_grades_the_episode_through_its_environment(
    tmp_path: Path, content: str, reward: float
) -> None:
    (tmp_path / "checks.py").write_text(readme_checker())
    (tmp_path / "task.yaml").write_text(TASK)
    with TaskEnv(tmp_path / "task.yaml") as env:
        episode = run_episode(env, ScriptedPolicy([{"tool": "write_file", "path": "greeting.txt", "content": content}]))
    assert episode.reward == reward, episode.info["checker"]


def test_the_readme_checker_raising_gives_no_reward(tmp_path: Path) -> None:
    # the manual's checker raises when its command does not end by itself (here: held past a short time limit)
    source = readme_checker().replace('env.bash("cat greeting.txt")', 'env.bash("sleep 5", __import__("dataclasses")'
                                      '.replace(env.task.step_limits, wall_time=0.2))')  # fmt: skip
    (tmp_path / "checks.py").write_text(source)
    (tmp_path / "task.yaml").write_text(TASK)
    with TaskEnv(tmp_path / "task.yaml") as env:
        episode = run_episode(env, ScriptedPolicy([]))
    assert episode.reward is None
    assert "reading greeting.txt stopped: timeout" in episode.info["checker"]["reason"]
