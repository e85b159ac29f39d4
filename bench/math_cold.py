"""Benchmark: math-equiv cold against math-verify cold, each from a fresh process, on a hard mix.

    .venv/bin/python bench/math_cold.py [--runs 5] [--limit 0] [--batch 1024] [--corpus PATH] [--first-run]
                                        [--profile] [--quick]

Cold means everything a new scoring process pays before its first verdicts: the interpreter start, the imports,
math-equiv's symbolic worker pool (started only when a record needs it) and the scoring itself. Each run starts
one fresh process per side, in turn, and times it from its launch until it has printed its verdicts (its exit,
which stops the pool, is not counted); the ratio is math-verify's median over math-equiv's median, side by side
in the same run.

The hard mix is the labelled regression corpus (``testdata/math_equiv/corpus.jsonl``: math-verify's own grader
pairs and constructed hard positives and negatives: sets, intervals, matrices, equations, sums, huge exact
values, units...), about one pair in six beyond the pure-Python fast path. Both sides score every pair:

- math-verify as reward functions call it, serially: ``verify(parse(gold), parse(completion))``, the gold
  boxed unless it carries its own math delimiters, an exception counted as a fail;
- math-equiv as a reward function calls it: ``get_evaluator("math-equiv").score_batch`` in batches of
  ``--batch`` (a GRPO step's rollouts).

math-equiv's workers keep the LaTeX parser's prediction cache under ``$EVALSI_CACHE_DIR``, so every run after
a machine's first starts with it. ``--first-run`` gives each math-equiv process a new, empty cache directory: each
run is then a machine's first (the parser starts from the prediction cache that ships with evalsi).

``--profile`` adds one math-equiv process under cProfile (the scoring process only; the workers' own time
shows as waiting) and ``python -X importtime``'s slowest imports of math-equiv.

Beside the wall-clock times it prints the CPU seconds of each side (for math-equiv: the scoring process, the
worker template and the workers, read from ``/proc`` on Linux): on a busy machine those vary far less than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _startup import compile_evalsi

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "testdata" / "math_equiv" / "corpus.jsonl"


def load(path: Path, limit: int) -> list[dict[str, Any]]:
    """The corpus rows; with ``limit``, that many spread evenly over the file (every class represented)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if 0 < limit < len(rows):
        step = len(rows) / limit
        rows = [rows[int(i * step)] for i in range(limit)]
    return rows


def own_cpu() -> float:
    """CPU seconds this process has used (user and system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    """CPU seconds process ``pid`` has used so far, from ``/proc`` (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pool_cpu() -> tuple[float, float]:
    """CPU seconds of math-equiv's worker template and of its live workers (Linux; zeros elsewhere).

    On a busy machine wall-clock times swing with the load; CPU seconds are what the work costs.
    """
    from evalsi.evaluators.rl.math_equiv import _pool

    pid = getattr(_pool._server, "_forkserver_pid", None)
    if pid is None:
        return 0.0, 0.0
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if not children.exists():
        return 0.0, 0.0
    return process_cpu(pid), sum(process_cpu(int(child)) for child in children.read_text().split())


def child_math_verify(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """math-verify's verdicts, importing it first (part of the cold cost)."""
    from math_verify import parse, verify

    verdicts: list[bool] = []
    for row in rows:
        gold = row["gold"]
        if not any(mark in gold for mark in ("$", "\\boxed", "\\(", "\\[")):
            gold = "\\boxed{" + gold + "}"
        try:
            verdicts.append(bool(verify(parse(gold), parse(row["completion"]))))
        except Exception:
            verdicts.append(False)
    return {"verdicts": verdicts, "cpu_s": own_cpu()}


def child_math_equiv(rows: list[dict[str, Any]], batch: int) -> dict[str, Any]:
    """math-equiv's verdicts, importing evalsi first (part of the cold cost), with when each phase ended."""
    start = time.perf_counter()
    from evalsi.evaluators import ScoreContext, get_evaluator
    from evalsi.records import Record

    evaluator = get_evaluator("math-equiv")
    params = evaluator.parse_params({})
    imported = time.perf_counter()
    records = [Record(completion=row["completion"], reference=row["gold"]) for row in rows]
    scores: list[Any] = []
    for offset in range(0, len(records), batch):
        scores += evaluator.score_batch(records[offset : offset + batch], params, ScoreContext())
    symbolic = sum(
        1 for s in scores if (s.details or {}).get("method", "").startswith(("math-verify", "sympy", "exact", "equal"))
    )
    score_s = time.perf_counter() - imported
    template_cpu, workers_cpu = pool_cpu()
    return {
        "verdicts": [bool(s.value) for s in scores],
        "import_s": imported - start,
        "score_s": score_s,
        "symbolic": symbolic,
        "cpu_s": own_cpu(),
        "template_cpu_s": template_cpu,
        "workers_cpu_s": workers_cpu,
    }


def child(side: str, corpus: Path, limit: int, batch: int) -> None:
    """Score the mix in this (fresh) process and print one JSON line; the parent's clock stops on reading it."""
    rows = load(corpus, limit)
    result = child_math_verify(rows) if side == "math-verify" else child_math_equiv(rows, batch)
    print(json.dumps(result), flush=True)
    if side == "math-equiv":
        from evalsi.evaluators import get_evaluator

        get_evaluator("math-equiv").close()


def fresh(side: str, args: argparse.Namespace) -> tuple[float, dict[str, Any]]:
    """Seconds from launching a fresh process for ``side`` to its verdicts, and what it printed."""
    argv = [sys.executable, __file__, "--child", side, "--corpus", str(args.corpus), "--limit", str(args.limit)]
    argv += ["--batch", str(args.batch)]
    with tempfile.TemporaryDirectory(prefix="math-cold-cache-") as empty:
        env = dict(os.environ, EVALSI_CACHE_DIR=empty) if args.first_run else None
        start = time.perf_counter()
        with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env) as process:
            assert process.stdout is not None
            line = process.stdout.readline()
            elapsed = time.perf_counter() - start
            process.stdout.read()
            if process.wait() != 0 or not line:
                raise SystemExit(f"the {side} process failed (exit {process.returncode})")
    return elapsed, json.loads(line)


def agreement(rows: list[dict[str, Any]], verdicts: list[bool]) -> str:
    """Agreement with the labels on the unambiguous pairs."""
    pairs = [(r["label"], v) for r, v in zip(rows, verdicts, strict=True) if not r["ambiguous"]]
    return f"{sum(a == b for a, b in pairs) / len(pairs):.1%}"


def profile(args: argparse.Namespace) -> None:
    """Where a cold math-equiv process spends its time: slowest imports, then the scoring process's profile."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import evalsi.evaluators.rl.math_equiv"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:") and "|" in line]
    cumulative = sorted(lines[1:], key=lambda line: -int(line.split("|")[1]))
    print("slowest imports of math-equiv (cumulative us):")
    for line in cumulative[:12]:
        print("  " + line.removeprefix("import time:").strip())
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    rows = load(args.corpus, args.limit)
    profiler.enable()
    child_math_equiv(rows, args.batch)
    profiler.disable()
    print("scoring process, cumulative (includes its imports; the workers' time shows as waiting):")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(18)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--limit", type=int, default=0, help="pairs taken evenly from the corpus (0: all)")
    parser.add_argument("--batch", type=int, default=1024, help="math-equiv batch size (a GRPO step's rollouts)")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per side; the medians are compared")
    parser.add_argument(
        "--first-run", action="store_true", help="a new, empty cache directory per process (a machine's first run)"
    )
    parser.add_argument("--profile", action="store_true", help="also profile one cold math-equiv process")
    parser.add_argument("--quick", action="store_true", help="60 pairs, one run (a smoke run)")
    parser.add_argument("--child", choices=["math-verify", "math-equiv"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.corpus, args.limit, args.batch)
        return 0
    if args.quick:
        args.limit, args.runs = 60, 1
    compile_evalsi()
    rows = load(args.corpus, args.limit)
    caches = "a new, empty cache directory per process" if args.first_run else "the user's cache directory"
    print(
        f"hard mix: {len(rows)} labelled pairs from {args.corpus.relative_to(ROOT)}; {args.runs} fresh runs a side; "
        f"math-equiv with {caches}"
    )
    times: dict[str, list[float]] = {"math-verify": [], "math-equiv": []}
    results: dict[str, dict[str, Any]] = {}
    phases: list[tuple[float, float]] = []
    cpu: dict[str, list[float]] = {"math-verify": [], "math-equiv": [], "template": [], "workers": []}
    for run in range(args.runs):
        for side in times if run % 2 == 0 else reversed(times):  # alternate who goes first
            elapsed, results[side] = fresh(side, args)
            times[side].append(elapsed)
            if side == "math-equiv":
                phases.append((results[side]["import_s"], results[side]["score_s"]))
                cpu["template"].append(results[side]["template_cpu_s"])
                cpu["workers"].append(results[side]["workers_cpu_s"])
            cpu[side].append(results[side]["cpu_s"])
        print(
            f"  run {run + 1}: math-verify {times['math-verify'][-1]:.2f} s, "
            f"math-equiv {times['math-equiv'][-1]:.2f} s",
            flush=True,
        )
    mv, me = (statistics.median(times[side]) for side in ("math-verify", "math-equiv"))
    print(
        f"math-verify cold: {mv:.2f} s median ({len(rows) / mv:,.0f} pairs/s), "
        f"agreement with the labels {agreement(rows, results['math-verify']['verdicts'])}"
    )
    print(
        f"math-equiv cold:  {me:.2f} s median ({len(rows) / me:,.0f} pairs/s): import "
        f"{statistics.median(p[0] for p in phases):.2f} s, scoring {statistics.median(p[1] for p in phases):.2f} s "
        f"({results['math-equiv']['symbolic']} pairs decided symbolically), "
        f"agreement with the labels {agreement(rows, results['math-equiv']['verdicts'])}"
    )
    template, workers = (statistics.median(cpu[part]) for part in ("template", "workers"))
    me_cpu = statistics.median(
        own + t + w for own, t, w in zip(cpu["math-equiv"], cpu["template"], cpu["workers"], strict=True)
    )
    print(
        f"CPU seconds (medians): math-verify {statistics.median(cpu['math-verify']):.2f} s; math-equiv {me_cpu:.2f} s "
        f"(scoring process {statistics.median(cpu['math-equiv']):.2f} s, worker template {template:.2f} s, "
        f"workers {workers:.2f} s); load average {os.getloadavg()[0]:.1f}"
    )
    ratio = mv / me
    print(f"cold ratio (math-verify / math-equiv, median of fresh processes): {ratio:.1f}x; target >= 5x: ", end="")
    print("met" if ratio >= 5 else "MISSED")
    if args.profile:
        profile(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
