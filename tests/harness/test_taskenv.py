"""TaskEnv episodes: reset/step/close, rewards, truncation, malformed actions, and setup run once."""

from __future__ import annotations

import json

import pytest

from evalsi_harness import CommandChecker, Setup, Snapshot, TaskEnv, TaskEnvError
from evalsi_harness import _environment as environment_module

from .conftest import small_task


def test_an_episode_from_reset_to_submit(task) -> None:
    with TaskEnv(task) as env:
        observation, info = env.reset(seed=3)
        assert observation == "Write yes into done.txt."
        assert info["task"] == "small" and [t["function"]["name"] for t in info["tools"]][-1] == "submit"
        obs, reward, terminated, truncated, info = env.step({"tool": "bash", "command": "cat notes/readme.txt; pwd"})
        assert json.loads(obs) == {"exit_code": 0, "stdout": "the starting state\n/work\n", "stderr": "",
                                   "truncated": False}  # fmt: skip
        assert (reward, terminated, truncated) == (0.0, False, False) and info["step"] == 1
        obs, reward, *_ = env.step({"tool": "write_file", "path": "done.txt", "content": "yes\n"})
        assert json.loads(obs) == {"written": "done.txt", "chars": 4} and reward == 0.0
        obs, *_ = env.step('{"tool": "read_file", "path": "done.txt"}')
        assert json.loads(obs) == {"content": "yes\n", "truncated": False}
        obs, reward, terminated, truncated, info = env.step({"tool": "submit"})
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert info["checker"]["passed"] is True and info["checker"]["reason"] == "exit status 0"
        with pytest.raises(TaskEnvError, match="call reset"):
            env.step({"tool": "submit"})


def test_a_wrong_end_state_earns_zero_and_a_failed_command_is_an_observation(task) -> None:
    with TaskEnv(task) as env:
        env.reset()
        obs, reward, *_ = env.step({"tool": "bash", "command": "echo oops >&2; exit 3"})
        assert json.loads(obs)["exit_code"] == 3 and json.loads(obs)["stderr"] == "oops\n" and reward == 0.0
        obs, *_ = env.step({"tool": "read_file", "path": "missing.txt"})
        assert "No such file" in json.loads(obs)["error"]
        _, reward, terminated, _, info = env.step({"tool": "submit"})
        assert reward == 0.0 and terminated and info["checker"]["passed"] is False


def test_malformed_actions_are_observations_and_count_as_steps() -> None:
    with TaskEnv(small_task(max_steps=2)) as env:
        env.reset()
        obs, reward, terminated, truncated, info = env.step("let me think about it")
        assert "not a JSON object" in json.loads(obs)["error"] and info["error"] == json.loads(obs)["error"]
        assert (reward, terminated, truncated) == (0.0, False, False)
        obs, reward, terminated, truncated, info = env.step({"tool": "delete_everything"})
        assert "unknown tool" in json.loads(obs)["error"]
        # out of steps: truncated, and the checker grades the end state
        assert (terminated, truncated, reward) == (False, True, 0.0)
        assert info["truncated_because"] == "max_steps (2) reached" and info["checker"]["passed"] is False


def test_running_out_of_steps_is_graded_not_lost() -> None:
    with TaskEnv(small_task(max_steps=1)) as env:
        env.reset()
        _, reward, terminated, truncated, _ = env.step({"tool": "bash", "command": "echo yes > done.txt"})
        assert (reward, terminated, truncated) == (1.0, False, True)


def test_reset_restores_the_snapshot_and_setup_runs_once(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[str] = []
    real = environment_module.Snapshot._run_setup

    def counting(self: Snapshot) -> None:
        runs.append(self.task.name)
        real(self)

    monkeypatch.setattr(environment_module.Snapshot, "_run_setup", counting)
    task = small_task(setup=Setup(files={"a.txt": "A\n"}, commands=["od -An -N8 -tx8 /dev/urandom > token"]))
    with TaskEnv(task) as env:
        env.reset()
        token = json.loads(env.step({"tool": "read_file", "path": "token"})[0])["content"]
        env.step({"tool": "bash", "command": "rm a.txt && mkdir -p junk && echo x > junk/f && chmod 000 junk"})
        env.step({"tool": "submit"})
        for _ in range(3):
            env.reset()
            listing = json.loads(env.step({"tool": "bash", "command": "ls -A; cat a.txt token"})[0])
            assert listing["stdout"] == f"a.txt\ntoken\nA\n{token}"
    assert runs == ["small"]


def test_step_before_reset_and_after_close_raise_clear_errors(task) -> None:
    env = TaskEnv(task)
    with pytest.raises(TaskEnvError, match=r"call reset\(\) first"):
        env.step({"tool": "submit"})
    env.close()
    env.close()  # twice is fine
    with pytest.raises(TaskEnvError, match="closed"):
        env.reset()


def test_a_failing_setup_names_the_command() -> None:
    from evalsi_harness import TaskSetupError

    task = small_task(setup=Setup(commands=["true", "echo broken >&2; exit 4"]))
    with pytest.raises(TaskSetupError, match=r"setup.commands\[1\] .* failed: exit status 4: broken"):
        TaskEnv(task)


@pytest.mark.parametrize("rung", ["process", "gvisor"])
def test_other_rungs_run_the_same_episode(rung: str) -> None:
    task = small_task(isolation=rung, setup=Setup(files={"a.txt": "A\n"}, commands=["ln -s a.txt link"]))
    with TaskEnv(task) as env:
        env.reset()
        assert json.loads(env.step({"tool": "read_file", "path": "link"})[0])["content"] == "A\n"
        env.reset()
        env.step({"tool": "write_file", "path": "done.txt", "content": "yes"})
        assert env.step({"tool": "submit"})[1] == 1.0
        env.reset()
        assert "No such file" in json.loads(env.step({"tool": "read_file", "path": "done.txt"})[0])["error"]


def test_stdout_scored_checker() -> None:
    checker = CommandChecker("""echo checking; python3 -c 'import os; print(len(os.listdir()) / 4)'""", score="stdout")
    with TaskEnv(small_task(checker=checker)) as env:
        env.reset()
        env.step({"tool": "bash", "command": "touch a b"})
        _, reward, _, _, info = env.step({"tool": "submit"})
        assert reward == 0.75 and info["checker"]["passed"] is None  # notes/, a, b: 3 of 4
