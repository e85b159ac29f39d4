"""Episodes never see each other's files, processes or network, and run concurrently."""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time

from evalsi_harness import Snapshot, TaskEnv, TaskEnvPool

from ._episodes import bash
from .conftest import small_task


def test_two_environments_of_one_task_do_not_share_files_or_processes() -> None:
    task = small_task()
    with Snapshot(task) as snapshot, TaskEnv(task, snapshot=snapshot) as a, TaskEnv(task, snapshot=snapshot) as b:
        a.reset()
        b.reset()
        token = secrets.token_hex(6)
        bash(a, f"echo {token} > mine.txt; echo {token} > /tmp/tmp.txt")
        seen = bash(b, f"ls -A; cat /tmp/tmp.txt; grep -rs {token} / 2>/dev/null | head -3")
        assert token not in seen["stdout"] and "mine.txt" not in seen["stdout"]
        # the shared snapshot is read-only: an episode cannot change what the next ones start from
        tamper = bash(a, "echo changed > /snapshot/notes/readme.txt; touch /snapshot/new")
        assert tamper["exit_code"] != 0 and "Read-only file system" in tamper["stderr"]
        b.reset()
        assert bash(b, "cat notes/readme.txt; ls -A")["stdout"] == "the starting state\nnotes\n"
        # each sandbox has its own pid namespace: b killing every process it can reach leaves a's alone
        outcome: dict[str, object] = {}
        waiting = threading.Thread(target=lambda: outcome.update(bash(a, "sleep 1.5; echo alive")))
        waiting.start()
        time.sleep(0.5)
        b.step({"tool": "bash", "command": "kill -9 -1"})
        waiting.join()
        assert outcome["stdout"] == "alive\n"


def test_a_background_process_does_not_survive_its_step() -> None:
    with TaskEnv(small_task()) as env:
        env.reset()
        started = bash(env, "(sleep 0.3; echo late > late.txt; sleep 60) > /dev/null 2>&1 & echo started")
        assert started["stdout"] == "started\n"
        time.sleep(0.8)
        after = bash(env, "ls -A; ps -e -o comm= 2>/dev/null | grep -c sleep")
        assert "late.txt" not in after["stdout"]


def test_no_network_in_an_episode() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    try:
        with TaskEnv(small_task()) as env:
            env.reset()
            probe = (
                'python3 -c "import socket, errno\n'
                f"for a in (('127.0.0.1', {port}), ('10.255.255.1', 80)):\n"
                "    try: socket.create_connection(a, timeout=20); print('connected')\n"
                '    except OSError as e: print(errno.errorcode.get(e.errno))"'
            )
            started = time.monotonic()
            out = bash(env, probe)
            assert time.monotonic() - started < 5
            for line in out["stdout"].split():
                assert line in ("ENETUNREACH", "ECONNREFUSED", "EAFNOSUPPORT"), out
        try:
            listener.accept()
            raise AssertionError("an episode reached the host's loopback")
        except TimeoutError:
            pass
    finally:
        listener.close()


def test_episodes_run_concurrently_and_each_grades_its_own_state() -> None:
    task = small_task()
    with TaskEnvPool(task, size=4) as pool:

        def episode(env: TaskEnv, index: int) -> tuple[float | None, float]:
            env.reset()
            started = time.monotonic()
            bash(env, "sleep 1")
            if index % 2 == 0:
                env.step({"tool": "write_file", "path": "done.txt", "content": "yes"})
            reward = env.step({"tool": "submit"})[1]
            return reward, started

        started = time.monotonic()
        results = pool.map(episode, list(range(8)))
        elapsed = time.monotonic() - started
    assert [r for r, _ in results] == [1.0, 0.0] * 4
    assert elapsed < 6, f"8 episodes with a 1 s step on 4 environments took {elapsed:.1f} s"  # serial: 8 s


def test_pool_shares_one_setup_and_hands_each_worker_its_own_environment() -> None:
    with TaskEnvPool(small_task(), size=3) as pool:
        assert len({id(env.snapshot) for env in pool.envs}) == 1
        held: list[TaskEnv] = []
        lock = threading.Lock()

        def take(_: int) -> None:
            with pool.acquire() as env:
                with lock:
                    assert env not in held
                    held.append(env)
                time.sleep(0.2)
                with lock:
                    held.remove(env)

        threads = [threading.Thread(target=take, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        snapshot_path = pool.snapshot.path
    assert not os.path.exists(snapshot_path)
