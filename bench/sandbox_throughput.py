"""Trivial stdin/stdout test cases per second on this machine, four ways, in one run.

(a) a fresh ``python3 -I -S`` per case, no isolation (the cheapest fresh interpreter: conservative ratios);
(b) the same inside bubblewrap, with evalsi's own bwrap options and seccomp filter;
(c) evalsi's ``namespaced`` fast path: ``code-exec-tests`` over a batch, a warm fork server per core;
(d) end to end: ``evalsi rewards score`` as a user runs it (a new process: start-up, spec, JSONL in and out, a
    format gate and ``code-exec-tests`` in the ``namespaced`` sandbox), timed from its start to its exit.

Then the latency per case through the same scoring path, one rollout of 10 cases at a time (a rollout's round
trip from ``Reward.score_records`` to its result, divided by its cases; p50 and p99), beside the fork server's
own fork-to-exit time per case. Targets: (c) >= 5x (b) and >= 3x (a); (d) >= 5x (a), p99 per case <= 2 ms.
Run: ``.venv/bin/python bench/sandbox_throughput.py [--quick]`` (a few minutes; --quick scales down).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evalsi.evaluators import ScoreContext, get_evaluator
from evalsi.records import from_rollout
from evalsi.rewards import from_mapping
from evalsi.sandbox import close_shared_pools
from evalsi.sandbox._host import PROBE_SLOT, drop_to, sandbox_python, sandbox_uid
from evalsi.sandbox._rungs import bwrap_argv
from evalsi.sandbox._seccomp import deny_filter

PROGRAM = "print(int(input()) * 2)\n"
CASES = 10
CORES = os.cpu_count() or 1
SPEC = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "code-grpo"},
    "spec": {
        "components": [
            {"ref": "format-check", "name": "format", "weight": 0.1, "gate": True,
             "params": {"pattern": "(?s).*```python\\n.*```.*"}},
            {"ref": "code-exec-tests", "name": "tests", "weight": 0.9, "sandbox": {"minIsolation": "namespaced"}},
        ],
        "cache": {"enabled": True},
    },
}  # fmt: skip
"""The example code reward (examples/finetuning/code-reward.yaml) as the CLI loads it."""


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


def rollout(r: int) -> dict[str, object]:
    """A rollout whose program passes its cases; every rollout's completion differs (no cache hits)."""
    return {
        "prompt": "Read n, print 2n.",
        "completion": f"```python\n{PROGRAM}# rollout {r}\n```",
        "tests": [{"input": f"{c}\n", "output": f"{2 * c}\n"} for c in range(CASES)],
    }


def evalsi_batch(rollouts: int) -> float:
    """Wall time of code-exec-tests over ``rollouts`` programs x CASES cases."""
    evaluator = get_evaluator("code-exec-tests")
    params = evaluator.parse_params({})
    records = [from_rollout(rollout(r)) for r in range(rollouts)]
    start = time.perf_counter()
    scores = evaluator.score_batch(records, params, ScoreContext("bench"))
    elapsed = time.perf_counter() - start
    assert all(s.value == 1.0 for s in scores), [s for s in scores if s.value != 1.0][:3]
    return elapsed


def cli_command() -> list[str]:
    """``evalsi`` as installed beside this interpreter (the console script), else the same entry point."""
    script = Path(sys.executable).with_name("evalsi")
    if script.is_file():
        return [sys.executable, str(script)]
    return [sys.executable, "-c", "from evalsi.cli.main import main; main()"]


def cli_end_to_end(rollouts: int, directory: Path) -> float:
    """Wall time of ``evalsi rewards score`` over ``rollouts`` x CASES cases, from its start to its exit."""
    spec, data, out = directory / "code-reward.json", directory / "rollouts.jsonl", directory / "scores.jsonl"
    spec.write_text(json.dumps(SPEC))
    data.write_text("".join(json.dumps(rollout(r)) + "\n" for r in range(rollouts)))
    (directory / "one.jsonl").write_text(json.dumps(rollout(-1)) + "\n")
    command = [*cli_command(), "rewards", "score", "--spec", str(spec), "-o", str(out), "-q", "--data"]
    # as installed: with its bytecode cached (a shell that sets PYTHONDONTWRITEBYTECODE would compile every start)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([*command, str(directory / "one.jsonl")], check=True, env=env)
    start = time.perf_counter()
    subprocess.run([*command, str(data)], check=True, env=env)
    elapsed = time.perf_counter() - start
    totals = [json.loads(line)["total"] for line in out.read_text().splitlines()]
    assert len(totals) == rollouts and all(t == 1.0 for t in totals), totals[:3]
    return elapsed


def per_case_end_to_end(n: int) -> list[float]:
    """ms per case of one rollout (CASES cases) scored alone through ``Reward.score_records``, n times."""
    reward = from_mapping(SPEC)
    reward.score_records(reward.records([rollout(-1)]))  # the sandbox is started
    out = []
    for r in range(n):
        records = reward.records([rollout(r)])
        start = time.perf_counter()
        (result,) = reward.score_records(records)
        out.append((time.perf_counter() - start) * 1000 / CASES)
        assert result.total == 1.0, result
    return out


def fork_to_exit(n: int) -> list[float]:
    """Fork-to-exit wall time of single cases, as one fork server running alone measured them (ms).

    A sandbox of its own: the pool would split the cases over its idle sandboxes, which then share the cores.
    """
    from evalsi.sandbox import RUNGS, Case, Limits, Sandbox

    sandbox = Sandbox(RUNGS["namespaced"])
    try:
        outcomes = sandbox.run(PROGRAM, [Case("stdio", stdin=f"{i}\n") for i in range(n)], Limits())
    finally:
        sandbox.close()
    return [o.run.wall_time * 1000 for o in outcomes]


def percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[int(0.99 * (len(ordered) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer cases (a smoke run)")
    args = parser.parse_args()
    n_base = 60 if args.quick else 240
    rollouts = 100 if args.quick else 1000
    python = sandbox_python(sandbox_uid(PROBE_SLOT)) or sys.executable
    print(f"interpreter {python}; {CORES} cores; trivial program: {PROGRAM.strip()!r}; {os.getloadavg()[0]:.1f} load")

    directory = Path(tempfile.mkdtemp(prefix="evalsi-bench-sandbox-"))
    try:
        program = directory / "program.py"
        program.write_text(PROGRAM)
        program.chmod(0o644)
        t_a = spread(fresh_python(python, str(program)), n_base)
        t_b = spread(fresh_bwrap(python), n_base)
        t_d = cli_end_to_end(rollouts, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    rate_a, rate_b, rate_d = n_base / t_a, n_base / t_b, rollouts * CASES / t_d

    evalsi_batch(CORES * 2)  # warm the pool: start one sandbox per core
    n_c_rollouts = max(CORES * 10, rollouts // 5)
    rate_c = n_c_rollouts * CASES / evalsi_batch(n_c_rollouts)
    forked = fork_to_exit(400)
    per_case = per_case_end_to_end(40 if args.quick else 200)
    close_shared_pools()

    for label, rate in (
        ("(a) fresh python -I -S per case, no isolation", rate_a),
        ("(b) fresh python -I -S per case in bubblewrap", rate_b),
        ("(c) evalsi namespaced fork server", rate_c),
        (f"(d) evalsi rewards score, {rollouts} x {CASES}", rate_d),
    ):
        print(f"{label:46s}: {rate:8.1f} cases/s  ({1000 * CORES / rate:6.2f} ms of a core per case)")
    print(f"ratios: (c)/(b) = {rate_c / rate_b:.1f}x (target >= 5x); (c)/(a) = {rate_c / rate_a:.1f}x (target >= 3x)")
    print(f"end to end: (d)/(a) = {rate_d / rate_a:.1f}x (target >= 5x); (d)/(b) = {rate_d / rate_b:.1f}x")
    p50, p99 = percentiles(forked)
    print(f"per case in the fork server (fork to exit): p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    p50, p99 = percentiles(per_case)
    print(f"per case end to end (a rollout of {CASES} cases alone, round trip / {CASES}): "
          f"p50 {p50:.2f} ms, p99 {p99:.2f} ms (target p99 <= 2 ms)")  # fmt: skip


if __name__ == "__main__":
    main()
