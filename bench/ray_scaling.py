"""Benchmark: the reward pool on Ray against in-process scoring, by number of actors.

    python bench/ray_scaling.py [--quick] [--address ADDRESS] [--batches 12] [--pairs 25] [--batch 256] [--actors 1,2,4]

Needs the ``ray`` extra (``pip install 'evalsi[ray]'``; the ``ray`` nox session has it). Without ``--address`` it
starts a local Ray instance with as many CPUs as the machine has (token authentication with a token of its own, so
a token file another Ray instance left in ``~/.ray`` does not lock it out). The workload is the example math reward
(format-check, math-equiv, overlong-penalty) over GRPO-style batches of ``--batch`` rollouts: ``--workload
grpo-math`` (the default) is the realistic mix of ``bench/math_equiv.py`` (word problems, fractions, LaTeX expressions,
sets; 8 samples per prompt repeating a few answers), each batch from its own seed; ``trivial`` is one-line answers
that math-equiv decides by a string comparison, so the pool's hops are most of its cost; ``code`` is the example
code reward (format-check, then code-exec-tests in the namespaced sandbox) over distinct programs of GRPO groups,
three test cases each, a third of them wrong: milliseconds of work per rollout, where the math reward spends
tens of microseconds. It prints:

1. rollouts/s of in-process scoring (``Reward.score``, one process with its math worker pool), measured before
   and after the pools, the faster counting;
2. rollouts/s of a ``RewardPool`` with 1, 2 and 4 actors (``pool.score`` of the same batches), and each one's
   ratio to in-process. Each configuration runs on a clean pool: the previous pool's ``shutdown()`` has
   returned only once its actors, their math workers and sandboxes are gone (the bench checks that no
   process of its actors is left before it starts the next), and ``pool.warm`` has started every actor's
   workers before the clock starts (an actor's math-equiv template imports sympy on first use: seconds). The
   1-actor pool's rate is taken after the paired batches of 3., so it has seen more rollouts than in-process
   has (the example's problems repeat, and its memo answers them): 3. is the like-for-like comparison;
3. the per-rollout overhead of the pool over in-process at that batch size, the cost of the hop (caller → actor
   and back, the pickling of records and scores): ``--pairs`` fresh batches are scored in turn by a fresh
   in-process reward and the 1-actor pool (each from the same start, so both have seen the same rollouts), and
   the overhead is the median over batches of (pool time / in-process time) − 1, so a burst of load on a shared
   machine lands on one pair, not on one side. The target is under 10% at 256-rollout batches;
4. the floor under that overhead on this machine: the same batches sent the same way to an actor that does no
   work and answers with their scores computed beforehand (records packed, one Ray call carrying them and
   the scores back, the scores unpacked), over the same in-process times. No design that scores a batch in
   another process through Ray pays less.

Ratios, not absolute numbers, are the result: they are measured in the same run on the same machine. The
machine's load average is printed before and after, so a figure taken on a busy machine says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import secrets
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import evalsi.rewards
from evalsi.ray import RewardPool

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "finetuning"
SPECS = {"grpo-math": EXAMPLES / "math-reward.yaml", "trivial": EXAMPLES / "math-reward.yaml"}
SPECS["code"] = EXAMPLES / "code-reward.yaml"
SPEC = SPECS["grpo-math"]
_counter = iter(range(10**9))


def make_batch(size: int, rng: random.Random) -> list[dict[str, Any]]:
    """GRPO-style rollouts: 8 samples per prompt, about a third wrong, each completion distinct in the run."""
    out = []
    for _ in range(size // 8):
        a, b = rng.randint(2, 999), rng.randint(2, 999)
        for _ in range(8):
            n = next(_counter)
            answer = a + b if rng.random() > 0.33 else a + b + 1
            text = f"Step {n}: adding {a} and {b} gives {a + b}. So the answer is \\boxed{{{answer}}}."
            out.append(
                {
                    "prompt": f"What is {a}+{b}?",
                    "completion": text,
                    "answer": str(a + b),
                    "completion_tokens": 20 + n % 50,
                }
            )
    return out


def code_batch(size: int, rng: random.Random) -> list[dict[str, Any]]:
    """GRPO groups of 8 programs (each distinct in the run) reading two numbers and printing their sum, three cases."""
    out = []
    for _ in range(size // 8):
        cases = [(rng.randint(-99, 99), rng.randint(-99, 99)) for _ in range(3)]
        tests = [{"input": f"{a} {b}\n", "output": f"{a + b}\n"} for a, b in cases]
        for _ in range(8):
            sign = "+" if rng.random() > 0.33 else "-"
            program = f"a, b = map(int, input().split())\nprint(a {sign} b)  # sample {next(_counter)}\n"
            out.append(
                {"prompt": "Print the sum of two integers.", "completion": f"```python\n{program}```", "tests": tests}
            )
    return out


def grpo_math_batch(size: int, rng: random.Random) -> list[dict[str, Any]]:
    """``bench/math_equiv.py``'s GRPO mix: ``size`` rollouts, 8 per prompt, from a fresh seed."""
    spec = importlib.util.spec_from_file_location("math_equiv_bench", Path(__file__).with_name("math_equiv.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rollouts: list[dict[str, Any]] = module.make_rollouts(size // 8, 8, rng.randrange(1 << 30))
    return rollouts


def timed(score: Any, batches: list[list[dict[str, Any]]]) -> float:
    """Rollouts per second of ``score`` over the batches (the first, a warm-up, not counted)."""
    score(batches[0])
    started = time.perf_counter()
    for batch in batches[1:]:
        score(batch)
    return sum(len(b) for b in batches[1:]) / (time.perf_counter() - started)


def fresh_reward(warm_up: list[dict[str, Any]]) -> evalsi.rewards.Reward:
    """The spec bound anew, with no memoised verdicts and its math workers started: what a new actor holds.

    The example's math problems repeat across batches, so a reward that scored earlier batches would answer
    from its cache and memo and flatter in-process scoring against a pool's fresh actors.
    """
    reward = evalsi.rewards.load(SPEC)  # the workload's spec (``main`` sets it)
    for component in reward.components:
        component.evaluator.close()  # math-equiv forgets its verdicts (its workers start again on first use)
    reward.component_scores(reward.records(warm_up), cache=None)
    return reward


def breakdown(pool: RewardPool, batches: list[list[dict[str, Any]]]) -> tuple[float, float]:
    """Rollouts/s of ``pool.score`` over the batches (the first a warm-up), and the share of it its actors scored."""
    pool.score(batches[0])
    before = sum(actor.get("seconds", 0.0) for actor in pool.stats()["actors"])
    started = time.perf_counter()
    for batch in batches[1:]:
        pool.score(batch)
    elapsed = time.perf_counter() - started
    scoring = sum(actor.get("seconds", 0.0) for actor in pool.stats()["actors"]) - before
    return sum(len(b) for b in batches[1:]) / elapsed, scoring / elapsed


def paired(
    pool: RewardPool, reward: evalsi.rewards.Reward, batches: list[list[dict[str, Any]]]
) -> list[tuple[float, float]]:
    """Per batch (the first a warm-up), the pool's and in-process seconds on the same batch, taking turns first."""
    pool.score(batches[0])
    reward.score(batches[0])
    pairs = []
    for turn, batch in enumerate(batches[1:]):
        times = {}
        for side in ("pool", "in-process") if turn % 2 else ("in-process", "pool"):
            started = time.perf_counter()
            (pool.score if side == "pool" else reward.score)(batch)
            times[side] = time.perf_counter() - started
        pairs.append((times["pool"], times["in-process"]))
    return pairs


class Echo:
    """A scorer that does no work: it answers each chunk with the rows it is told to (the floor of a Ray hop)."""

    def __init__(self) -> None:
        self.rows: list[Any] = []

    def expect(self, rows: list[Any]) -> None:
        self.rows = rows

    def score_direct(self, spec_id: str, resource: dict[str, Any], keys: Any, *parts: bytes) -> tuple[list[Any], dict]:
        from evalsi.ray._wire import from_parts, unpack_records

        unpack_records(from_parts(parts))  # as a scorer reads its chunk
        return self.rows, {}


def floor(ray: Any, reward: evalsi.rewards.Reward, batches: list[list[dict[str, Any]]]) -> list[float]:
    """Per batch, the seconds the floor of a Ray hop adds to in-process scoring (see the module's description)."""
    from evalsi.ray._coordinator import content_keys
    from evalsi.ray._wire import join_keys, pack_records, pack_rows, to_parts, unpack_columns

    echo = ray.remote(Echo).options(num_cpus=0).remote()
    resource = reward.to_resource()
    jobs = [component.job for component in reward.components]
    added = []
    for batch in batches:  # the first a warm-up, as in ``paired``
        records = reward.records(batch)
        rows = pack_rows(reward.component_scores(records, cache=None), len(records))
        ray.get(echo.expect.remote(rows))
        keys = content_keys(jobs, records)  # what a pool's caller computes and in-process scoring does too
        started = time.perf_counter()
        parts = to_parts(pack_records(records))
        answer, _ = ray.get(echo.score_direct.remote("spec", resource, join_keys(keys), *parts))
        unpack_columns(answer, len(jobs))
        added.append(time.perf_counter() - started)
    ray.kill(echo)
    return added[1:]


def left_running(pids: set[int]) -> list[str]:
    """Which of ``pids`` (a stopped pool's actors and their workers) still run on this machine, as ``ps`` lists them.

    Only this run's own processes: other Ray clusters on the machine have scorer actors of their own.
    """
    out = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True, check=False).stdout
    rows = (line.strip().split(None, 2) for line in out.splitlines()[1:])
    return [" ".join(row) for row in rows if len(row) == 3 and int(row[0]) in pids and not row[1].startswith("Z")]


def quartiles(values: list[float]) -> str:
    """The first and third quartiles of ``values``, as ratios."""
    if len(values) < 2:
        return "-"
    low, _, high = statistics.quantiles(values, n=4)
    return f"{low:.3f}-{high:.3f}"


def load() -> str:
    """The machine's load average (1, 5, 15 minutes)."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (3 batches of 64, 1 and 2 actors)")
    parser.add_argument("--address", default=None, help="a running Ray cluster (default: a local one)")
    parser.add_argument("--pairs", type=int, default=25, help="batches scored in turn by the pool and in-process")
    parser.add_argument("--batches", type=int, default=12, help="batches per rate (the first a warm-up)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--actors", default="1,2,4")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workload", choices=["grpo-math", "trivial", "code"], default="grpo-math")
    args = parser.parse_args()
    if args.quick:
        args.batches, args.batch, args.actors, args.pairs = 3, 64, "1,2", 3
    if not args.address:  # read when Ray is imported
        os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
        os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    import ray

    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:  # a new local instance, never a cluster some other process started on this machine
        ray.init(
            address="local",
            num_cpus=os.cpu_count(),
            include_dashboard=False,
            object_store_memory=200 * 1024 * 1024,
            log_to_driver=False,
        )
    rng = random.Random(args.seed)

    global SPEC
    SPEC = SPECS[args.workload]
    make = {"grpo-math": grpo_math_batch, "trivial": make_batch, "code": code_batch}[args.workload]

    def batches() -> list[list[dict[str, Any]]]:
        return [make(args.batch, rng) for _ in range(args.batches)]

    load_before = load()
    warm_up = make(args.batch, rng)
    # measured before and after the pools, the faster counting: right after ray.init, Ray's own processes are
    # still starting on the same cores, which would flatter the pool
    first = timed(fresh_reward(warm_up).score, batches())
    rates: dict[int, float] = {}
    busy: dict[int, float] = {}
    pairs: list[tuple[float, float]] = []
    paired_batches: list[list[dict[str, Any]]] = []
    previous: set[int] = set()
    for count in (int(c) for c in args.actors.split(",")):
        left = left_running(previous)
        if left:
            raise SystemExit(f"scorer actors of the previous pool are still running: {left}")
        pool = RewardPool(SPEC, num_workers=count, num_cpus=0.5, name=f"bench-{count}")
        try:
            pool.warm(warm_up)  # every actor's workers started before the clock does
            if count == 1:  # before its rate: the pool and a fresh reward start from the same place
                paired_batches = [make(args.batch, rng) for _ in range(args.pairs + 1)]
                pairs = paired(pool, fresh_reward(warm_up), paired_batches)
            rates[count], busy[count] = breakdown(pool, batches())
            previous = {pid for actor in pool.where() for pid in (actor["pid"], *actor["children"])}
        finally:
            stopped = pool.shutdown()
        if not all(actor["dead"] for actor in stopped):
            raise SystemExit(f"the {count}-actor pool's actors were not all gone after shutdown: {stopped}")
    in_process = max(first, timed(fresh_reward(warm_up).score, batches()))
    print(f"load average before: {load_before}; after: {load()}")
    print(f"in-process                 {in_process:9.1f} rollouts/s  (before the pools {first:.1f})")
    for count, rate in rates.items():
        print(
            f"pool, {count} actor{'s' if count > 1 else ' '}           {rate:9.1f} rollouts/s  "
            f"{rate / in_process:5.2f}x in-process  (actors scoring {busy[count]:.0%} of the time)"
        )
    if 1 in rates:
        ratios = [on_pool / here for on_pool, here in pairs]
        ratio = statistics.median(ratios)
        print(
            f"per-rollout overhead of the pool (1 actor) over in-process at {args.batch}-rollout batches: "
            f"{ratio - 1:+.1%} (median over {len(ratios)} batches of pool / in-process time on the same batch; "
            f"quartiles {quartiles(ratios)}; target < 1.10 at 256)"
        )
        extra = statistics.median(on_pool - here for on_pool, here in pairs)
        alone = statistics.median(here for _, here in pairs)
        print(f"  a batch took {extra * 1000:.1f} ms more on the pool (median), in-process {alone * 1000:.1f} ms")
        print(
            f"  of a 1-actor call's time, {busy[1]:.0%} is the actor scoring, {1 - busy[1]:.0%} the hop (caller -> "
            "actor and back, pickling records and scores)"
        )
        hop = floor(ray, fresh_reward(warm_up), paired_batches)
        floors = [added / here for added, (_, here) in zip(hop, pairs, strict=True)]
        print(
            f"  the floor on this machine: {statistics.median(floors):+.1%} ({statistics.median(hop) * 1000:.1f} ms: "
            "the same batches sent to an actor that does no work and answers with their scores; quartiles "
            f"{quartiles([1 + f for f in floors])})"
        )
    print(f"(cpus: {os.cpu_count()}; ratios are of this run on this machine)")
    ray.shutdown()


if __name__ == "__main__":
    main()
