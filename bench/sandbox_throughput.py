"""Trivial stdin/stdout test cases per second on this machine, three ways, in one run.

(a) a fresh ``python3 -I -S`` per case, no isolation (the cheapest fresh interpreter: conservative ratios);
(b) the same inside bubblewrap, with evalsi's own bwrap options and seccomp filter;
(c) evalsi's ``namespaced`` fast path: ``code-exec-tests`` over a batch, a warm fork server per core.

Then the wall time of a batch of 1,000 rollouts x 10 cases end to end. Targets: (c) >= 5x (b) and
>= 3x (a). Run: ``.venv/bin/python bench/sandbox_throughput.py [--quick]`` (about a minute; --quick scales down).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from evalsi.evaluators import ScoreContext, get_evaluator
from evalsi.records import from_rollout
from evalsi.sandbox import close_shared_pools, shared_pool
from evalsi.sandbox._host import PROBE_SLOT, drop_to, sandbox_python, sandbox_uid
from evalsi.sandbox._rungs import bwrap_argv
from evalsi.sandbox._seccomp import deny_filter

PROGRAM = "print(int(input()) * 2)\n"
CORES = os.cpu_count() or 1


def spread(fn, n: int) -> float:
    """Run fn(i) for i < n on one thread per core; returns the wall time."""
    start = time.perf_counter()
    with ThreadPoolExecutor(CORES) as pool:
        results = list(pool.map(fn, range(n)))
    elapsed = time.perf_counter() - start
    assert all(results), "a baseline case failed"
    return elapsed


def fresh_python(python: str, path: str):
    def case(i: int) -> bool:
        done = subprocess.run([python, "-I", "-S", path], input=f"{i}\n", capture_output=True, text=True, check=False)
        return done.stdout == f"{2 * i}\n"

    return case


def fresh_bwrap(python: str):
    uid = drop_to(sandbox_uid(PROBE_SLOT))

    def case(i: int) -> bool:
        seccomp = os.memfd_create("seccomp", 0)
        os.write(seccomp, deny_filter())
        os.lseek(seccomp, 0, os.SEEK_SET)
        argv = [*bwrap_argv(python, seccomp), python, "-I", "-S", "-c", PROGRAM]
        try:
            done = subprocess.run(
                argv, input=f"{i}\n", capture_output=True, text=True, check=False, pass_fds=(seccomp,),
                env={}, user=uid, group=uid, extra_groups=None if uid is None else [],
            )  # fmt: skip
        finally:
            os.close(seccomp)
        return done.stdout == f"{2 * i}\n"

    return case


def evalsi_batch(rollouts: int, cases: int) -> tuple[float, list[float]]:
    """Wall time of code-exec-tests over ``rollouts`` programs x ``cases`` cases, and the per-case wall times."""
    evaluator = get_evaluator("code-exec-tests")
    params = evaluator.parse_params({})
    records = [
        from_rollout(
            {
                "completion": f"{PROGRAM}# rollout {r}\n",
                "tests": [{"input": f"{c}\n", "output": f"{2 * c}\n"} for c in range(cases)],
            }
        )
        for r in range(rollouts)
    ]
    start = time.perf_counter()
    scores = evaluator.score_batch(records, params, ScoreContext("bench"))
    elapsed = time.perf_counter() - start
    assert all(s.value == 1.0 for s in scores), [s for s in scores if s.value != 1.0][:3]
    return elapsed, []


def per_case_latency(n: int) -> list[float]:
    """Fork-to-exit wall time of single cases, as the fork server measured them (ms)."""
    from evalsi.sandbox import Case, Limits

    pool = shared_pool("namespaced")
    outcomes = pool.run(PROGRAM, [Case("stdio", stdin=f"{i}\n") for i in range(n)], Limits())
    return [o.run.wall_time * 1000 for o in outcomes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer cases (a smoke run)")
    args = parser.parse_args()
    n_base = 60 if args.quick else 240
    rollouts = 100 if args.quick else 1000
    python = sandbox_python(sandbox_uid(PROBE_SLOT)) or sys.executable
    print(f"interpreter {python}; {CORES} cores; trivial program: {PROGRAM.strip()!r}")

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(PROGRAM)
    os.chmod(fh.name, 0o644)
    try:
        t_a = spread(fresh_python(python, fh.name), n_base)
    finally:
        os.unlink(fh.name)
    t_b = spread(fresh_bwrap(python), n_base)
    rate_a, rate_b = n_base / t_a, n_base / t_b

    evalsi_batch(CORES * 2, 10)  # warm the pool: start one sandbox per core
    n_c_rollouts = max(CORES * 10, rollouts // 5)
    t_c, _ = evalsi_batch(n_c_rollouts, 10)
    rate_c = n_c_rollouts * 10 / t_c
    latency = sorted(per_case_latency(400))
    t_batch, _ = evalsi_batch(rollouts, 10)
    close_shared_pools()

    for label, rate in (
        ("(a) fresh python -I -S per case, no isolation", rate_a),
        ("(b) fresh python -I -S per case in bubblewrap", rate_b),
        ("(c) evalsi namespaced fork server", rate_c),
    ):
        print(f"{label:46s}: {rate:8.1f} cases/s  ({1000 * CORES / rate:6.2f} ms of a core per case)")
    print(f"ratios: (c)/(b) = {rate_c / rate_b:.1f}x (target >= 5x); (c)/(a) = {rate_c / rate_a:.1f}x (target >= 3x)")
    p50 = statistics.median(latency)
    p99 = latency[int(0.99 * (len(latency) - 1))]
    print(f"per-case latency in the fork server (fork to exit, one core): p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    rate = rollouts * 10 / t_batch
    print(f"batch of {rollouts} rollouts x 10 cases end to end: {t_batch:.2f} s ({rate:.0f} cases/s)")


if __name__ == "__main__":
    main()
