"""The sandbox's guarantees hold inside episodes: hostile commands are contained and cannot reach the host."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from evalsi_harness import TaskEnv

from ._episodes import bash
from .conftest import small_task


@pytest.fixture(scope="module")
def env() -> Iterator[TaskEnv]:
    with TaskEnv(small_task()) as environment:
        yield environment


def test_fork_bomb_is_contained(env: TaskEnv) -> None:
    env.reset()
    out = bash(env, "bomb() { bomb | bomb & }; bomb; sleep 1; echo survived")
    assert out["exit_code"] is not None or out.get("stopped")
    assert bash(env, "echo still fine")["stdout"] == "still fine\n"


def test_memory_bomb_is_contained(env: TaskEnv) -> None:
    env.reset()
    out = bash(env, "python3 -c 'x = bytearray(8 << 30)'")
    assert out["exit_code"] != 0 and "MemoryError" in out["stderr"]


def test_output_flood_is_truncated(env: TaskEnv) -> None:
    env.reset()
    out = bash(env, "yes flood | head -c 10000000")
    assert out["truncated"] is True and len(out["stdout"]) <= env.task.step_limits.max_output_bytes


def test_writes_outside_the_work_dir_do_not_reach_the_host(env: TaskEnv) -> None:
    env.reset()
    token = secrets.token_hex(6)
    targets = [f"/tmp/../evalsi-hostile-{token}", f"/usr/evalsi-hostile-{token}", f"/work/../evalsi-hostile-{token}"]
    for path in targets:
        env.step({"tool": "write_file", "path": path, "content": "pwned"})
    bash(env, f"echo pwned > /evalsi-hostile-{token}-b 2>/dev/null; ln -s /etc/passwd link; echo x >> link")
    for path in [*targets, f"/evalsi-hostile-{token}", f"/evalsi-hostile-{token}-b", f"/usr/evalsi-hostile-{token}"]:
        assert not os.path.exists(os.path.normpath(path)), path


def test_host_secrets_are_not_visible_through_any_tool(env: TaskEnv) -> None:
    env.reset()
    for path in ("/etc/shadow", "/root/.bash_history", "/proc/1/environ", "/work/main/pyproject.toml"):
        read = env.step({"tool": "read_file", "path": path})[0]
        assert '"error"' in read and "root:" not in read, (path, read)
    bash(env, "ln -s /etc/shadow shadow-link")
    assert '"error"' in env.step({"tool": "read_file", "path": "shadow-link"})[0]
    assert bash(env, "id -u; ls /proc | wc -l")["stdout"] == "1000\n0\n"  # no /proc: no other process to see


def test_killing_the_sandbox_ends_the_episode_with_zero_and_the_next_one_is_fine(env: TaskEnv) -> None:
    env.reset()
    bash(env, "echo yes > done.txt")  # a passing state, destroyed below: killing the sandbox must not pay
    _, reward, terminated, truncated, info = env.step({"tool": "bash", "command": "kill -9 -1; sleep 1"})
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert "sandbox failed" in info["error"] and "killed its sandbox" in info["checker"]["reason"]
    env.reset()
    assert bash(env, "cat notes/readme.txt")["stdout"] == "the starting state\n"
    env.step({"tool": "write_file", "path": "done.txt", "content": "yes"})
    assert env.step({"tool": "submit"})[1] == 1.0


def test_filling_the_disk_is_contained_and_the_next_episode_starts_clean(env: TaskEnv) -> None:
    env.reset()
    fill = bash(env, "for i in 1 2 3 4 5 6; do head -c 60M /dev/zero > f$i || break; done; df -m . | tail -1")
    assert "No space left on device" in fill["stderr"]  # the work dir is a 256 MiB tmpfs, not the host's disk
    env.reset()
    assert bash(env, "ls -A; df -m . | tail -1 | tr -s ' ' | cut -d' ' -f3")["stdout"] == "notes\n1\n"
