"""Per-step and per-episode limits: a step is killed past its limits; an episode is truncated past its own."""

from __future__ import annotations

import dataclasses
import json
import time

from evalsi.sandbox import Limits
from evalsi_harness import TaskEnv

from .conftest import small_task


def test_a_step_past_its_wall_time_is_killed_and_the_episode_goes_on() -> None:
    with TaskEnv(small_task(step_limits=Limits(wall_time=0.5, cpu_time=5))) as env:
        env.reset()
        started = time.monotonic()
        obs, reward, terminated, truncated, info = env.step({"tool": "bash", "command": "sleep 10; echo never"})
        assert time.monotonic() - started < 3
        decoded = json.loads(obs)
        assert decoded["stopped"] == "killed: ran past the step's wall time" and decoded["stdout"] == ""
        assert (reward, terminated, truncated) == (0.0, False, False) and info["result"]["reason"] == "timeout"
        assert json.loads(env.step({"tool": "bash", "command": "echo next"})[0])["stdout"] == "next\n"


def test_a_step_past_its_cpu_time_is_killed() -> None:
    with TaskEnv(small_task(step_limits=Limits(wall_time=10, cpu_time=1))) as env:
        env.reset()
        obs, *_, info = env.step({"tool": "bash", "command": "python3 -c 'while True: pass'"})
        assert info["result"]["reason"] == "cpu" and "CPU time" in json.loads(obs)["stopped"]


def test_file_size_and_process_limits_hold() -> None:
    limits = dataclasses.replace(Limits(), max_file_bytes=1 << 20, max_output_bytes=1 << 16, max_processes=8)
    with TaskEnv(small_task(step_limits=limits)) as env:
        env.reset()
        big = json.loads(env.step({"tool": "bash", "command": "head -c 5000000 /dev/zero > big"})[0])
        assert big["exit_code"] != 0, big
        size = json.loads(env.step({"tool": "bash", "command": "stat -c %s big"})[0])["stdout"].strip()
        assert int(size) == 1 << 20
        many = json.loads(env.step({"tool": "bash", "command": "for i in $(seq 30); do sleep 2 & done; wait"})[0])
        assert "Resource temporarily unavailable" in many["stderr"] or "fork" in many["stderr"]


def test_the_episode_wall_time_truncates_and_the_checker_still_grades() -> None:
    task = small_task(episode_wall_time=1.0, step_limits=Limits(wall_time=5))
    with TaskEnv(task) as env:
        env.reset()
        _, reward, terminated, truncated, _ = env.step({"tool": "bash", "command": "echo yes > done.txt; sleep 0.6"})
        assert not truncated
        _, reward, terminated, truncated, info = env.step({"tool": "bash", "command": "sleep 0.6"})
        assert (terminated, truncated, reward) == (False, True, 1.0)
        assert info["truncated_because"] == "the episode's wall time (1 s) ran out"


def test_the_episode_cpu_time_truncates() -> None:
    task = small_task(episode_cpu_time=0.5, step_limits=Limits(wall_time=10, cpu_time=10))
    with TaskEnv(task) as env:
        env.reset()
        burn = "python3 -c 'import time\nt = time.process_time()\nwhile time.process_time() - t < 0.7: pass'"
        _, reward, _, truncated, info = env.step({"tool": "bash", "command": burn})
        assert truncated and reward == 0.0 and "CPU time (0.5 s)" in info["truncated_because"]
