"""TaskEnv against gymnasium's conventions when gymnasium is installed, and the same API without it."""

from __future__ import annotations

import subprocess
import sys

import gymnasium

from evalsi_harness.gym import ENV_ID, TaskEnv

from .conftest import example


def test_taskenv_is_a_registered_gymnasium_env() -> None:
    assert issubclass(TaskEnv, gymnasium.Env)
    env = gymnasium.make(ENV_ID, task=str(example("write-file")), disable_env_checker=False)
    try:
        observation, info = env.reset(seed=7)
        assert observation.startswith("Create a file named greeting.txt") and info["task"] == "write-greeting"
        assert env.unwrapped.np_random is not None
        assert env.observation_space.contains("ok") and env.action_space.contains('{"tool": "submit"}')
        env.step({"tool": "write_file", "path": "greeting.txt", "content": "hello, world"})
        _, reward, terminated, truncated, info = env.step('{"tool": "submit"}')
        assert (reward, terminated, truncated) == (1.0, True, False)
    finally:
        env.close()


def test_without_gymnasium_the_same_api_works() -> None:
    code = (
        "import sys; sys.modules['gymnasium'] = None\n"
        "from evalsi_harness.gym import TaskEnv\n"
        "assert TaskEnv.__mro__[1] is object\n"
        f"with TaskEnv({str(example('write-file'))!r}) as env:\n"
        "    obs, info = env.reset(seed=1)\n"
        "    print(env.step({'tool': 'submit'})[1:4])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(0.0, True, False)"
