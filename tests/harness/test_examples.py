"""Every example task is solved by its solving policy and not by its failing one; the example script runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from evalsi_harness import ScriptedPolicy, TaskEnv, run_episode

from .conftest import EXAMPLES, example

sys.path.insert(0, str(EXAMPLES))
from policies import FAILING, SOLVING

NAMES = ["write-file", "fix-failing-test", "shell-sort-logs"]


def test_every_example_has_both_policies() -> None:
    assert set(SOLVING) == set(FAILING) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_solving_policy_earns_one_and_failing_policy_less(name: str) -> None:
    with TaskEnv(example(name)) as env:
        solved = run_episode(env, ScriptedPolicy(SOLVING[name]))
        failed = run_episode(env, ScriptedPolicy(FAILING[name]))
        again = run_episode(env, ScriptedPolicy(SOLVING[name]))  # the failing episode left nothing behind
    assert solved.reward == 1.0 and solved.terminated, solved.info
    assert failed.reward is not None and failed.reward < 1.0, failed.info
    assert again.reward == 1.0


def test_fix_failing_test_failing_policy_fools_the_visible_test_but_not_the_checker() -> None:
    with TaskEnv(example("fix-failing-test")) as env:
        episode = run_episode(env, ScriptedPolicy(FAILING["fix-failing-test"]))
    visible = [m for m in episode.messages if m["role"] == "tool"][1]
    assert '"exit_code": 0' in visible["content"] and episode.reward == 0.0


@pytest.mark.parametrize(("policy", "status"), [("solving", 0), ("failing", 1)])
def test_run_agent_script(policy: str, status: int) -> None:
    script = EXAMPLES / "run_agent.py"
    done = subprocess.run([sys.executable, str(script), str(example("shell-sort-logs")), "--scripted", policy],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == status, done.stderr
    assert ("reward: 1.0" in done.stdout) == (status == 0)
