"""TaskEnv reset latency: restoring the setup snapshot against re-running a ~1 s setup; and bash steps per second.

The task's setup builds a small git repository (files written, a commit, byte-compiled): about a second here.
(a) re-running setup at every reset: the work dir wiped, then the setup files and commands run again in the
    same warm sandbox (the cheapest way to reset without a snapshot: no sandbox start is counted);
(b) ``TaskEnv.reset()``: the work dir restored from the snapshot taken once.
Then trivial ``bash`` actions (``true``) per second, on one environment and on a pool (one per core).
Target: (b) >= 10x faster than (a). Run: ``.venv/bin/python bench/taskenv_reset.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from evalsi_harness import CommandChecker, Setup, Task, TaskEnv, TaskEnvPool

FILES = 120
"""Modules in the generated repository (tuned so that setup takes about a second on a 2-core machine)."""


def make_task(files: int) -> Task:
    generate = (
        f"mkdir -p pkg && for i in $(seq {files}); do "
        "printf 'def f%s(x):\\n    return x + %s\\n' $i $i > pkg/mod_$i.py; done"
    )
    commands = [
        generate,
        "git init -q && git add -A && git -c user.name=b -c user.email=b@localhost commit -qm init",
        "python3 -m compileall -q pkg",
        "for i in $(seq 40); do git log --oneline > /dev/null; done",
    ]
    return Task(
        name="bench-repo",
        description="Bench task.",
        checker=CommandChecker("true"),
        setup=Setup(files={"README.md": "# bench\n", "pkg/__init__.py": ""}, commands=commands),
        max_steps=100_000,
        episode_wall_time=1e9,
        episode_cpu_time=1e9,
    )


def rerun_setup(env: TaskEnv) -> float:
    """Reset without a snapshot: wipe the work dir and run the task's setup again, in the same sandbox."""
    task, environment = env.task, env.environment
    started = time.perf_counter()
    wiped = environment.clear()
    assert wiped.ok, wiped
    for path, text in task.setup.files.items():
        assert environment.write_file(path, text).ok
    for command in task.setup.commands:
        done = environment.bash(command)
        assert done.ok, done
    return time.perf_counter() - started


def timed_reset(env: TaskEnv) -> float:
    started = time.perf_counter()
    env.reset()
    return time.perf_counter() - started


def steps_per_second(env: TaskEnv, n: int) -> float:
    env.reset()
    started = time.perf_counter()
    for _ in range(n):
        env.step({"tool": "bash", "command": "true"})
    return n / (time.perf_counter() - started)


def pool_steps_per_second(pool: TaskEnvPool, n: int) -> float:
    def episode(env: TaskEnv, _: int) -> None:
        env.reset()
        for _ in range(n):
            env.step({"tool": "bash", "command": "true"})

    started = time.perf_counter()
    pool.map(episode, list(range(pool.size)))
    return pool.size * n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    reps, steps = (3, 100) if args.quick else (8, 400)
    task = make_task(FILES)
    started = time.perf_counter()
    with TaskEnv(task) as env:
        print(f"setup, once, snapshotted:   {time.perf_counter() - started:7.3f} s (sandbox start included)")
        env.reset()
        files = env.step({"tool": "bash", "command": "find . | wc -l"})[0]
        print(f"work dir entries:           {files}")
        baseline = [rerun_setup(env) for _ in range(reps)]
        snapshot = [timed_reset(env) for _ in range(reps * 5)]
        a, b = statistics.median(baseline), statistics.median(snapshot)
        print(f"(a) reset by re-running setup: median {a * 1000:8.1f} ms over {reps}")
        print(f"(b) reset from the snapshot:   median {b * 1000:8.1f} ms over {reps * 5}")
        print(f"(b) is {a / b:5.1f}x faster than (a)   (target >= 10x)")
        one = steps_per_second(env, steps)
    print(f"bash steps/s, one environment:          {one:7.0f}")
    size = os.cpu_count() or 1
    with TaskEnvPool(task, size=size) as pool:
        many = pool_steps_per_second(pool, steps)
    print(f"bash steps/s, pool of {size} environments:  {many:7.0f}  ({many / one:.2f}x one)")


if __name__ == "__main__":
    main()
