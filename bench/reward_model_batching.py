"""Benchmark: reward-model micro-batching against unbatched calls, in the same run.

A loopback OpenRLHF reward server takes 20 ms per call, whatever the batch (per-call latency dominates, as with a
GPU reward model behind HTTP). 1,000 distinct rollouts are scored with ``max_batch`` 32 and with ``max_batch`` 1
(everything else equal: ``max_concurrency`` 8, ``wait_ms`` 5), in two shapes:

- one batch: a single ``score_batch`` call with all 1,000 rollouts (a TRL/verl batch);
- per rollout: 1,000 single-rollout ``score_batch`` calls from 128 threads (OpenRLHF's agent executor sends one
  request per rollout, for every rollout of a step at once), which only cross-call merging can batch. With
  closed-loop callers the batch is capped by how many callers are waiting, so this shape gains less.

Prints HTTP calls (counted on the server), median wall time over the repeats, and the ratios.
Targets (the one-batch shape): at least 20x fewer calls and 5x less wall time.
Run: ``.venv/bin/python bench/reward_model_batching.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.model_servers import OpenRLHFRewardServer

from evalsi.evaluators import ScoreContext
from evalsi.evaluators.rl.reward_model import RewardModel, RewardModelParams
from evalsi.records import Record, from_rollout

CTX = ScoreContext(component="rm")


def rollouts(n: int, tag: str) -> list[Record]:
    return [
        from_rollout({"prompt": f"[{tag}] Q{i}: ", "completion": f"answer {i}", "answer": str(i)}) for i in range(n)
    ]


def one_batch(rm: RewardModel, params: RewardModelParams, records: list[Record]) -> None:
    scores = rm.score_batch(records, params, CTX)
    assert all(s.status == "ok" for s in scores), scores[0].reason


def per_rollout(rm: RewardModel, params: RewardModelParams, records: list[Record]) -> None:
    with ThreadPoolExecutor(128) as pool:
        scores = [s for batch in pool.map(lambda r: rm.score_batch([r], params, CTX), records) for s in batch]
    assert all(s.status == "ok" for s in scores), scores[0].reason


def measure(shape: str, max_batch: int, n: int, repeats: int, latency: float) -> tuple[float, float]:
    """Median calls and median wall seconds over ``repeats`` fresh runs."""
    calls, walls = [], []
    run = one_batch if shape == "one batch" else per_rollout
    for repeat in range(repeats):
        rm = RewardModel()
        with OpenRLHFRewardServer(delay=latency) as server:
            params = RewardModelParams(url=server.url + "/get_reward", max_batch=max_batch, wait_ms=5.0)
            records = rollouts(n, f"{shape}-{max_batch}-{repeat}")
            start = time.perf_counter()
            run(rm, params, records)
            walls.append(time.perf_counter() - start)
            calls.append(server.calls)
            rm.close()
    return statistics.median(calls), statistics.median(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description="reward-model batching benchmark")
    parser.add_argument("-n", type=int, default=1000, help="rollouts per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=20.0, help="server latency per call")
    parser.add_argument("--quick", action="store_true", help="a few rollouts, once (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.n, args.repeats = 64, 1
    latency = args.latency_ms / 1000
    print(f"{args.n} rollouts, server latency {args.latency_ms:g} ms/call, max_concurrency 8, median of {args.repeats}")
    print(f"{'shape':<12} {'max_batch':>9} {'calls':>7} {'wall s':>8}")
    for shape in ("one batch", "per rollout"):
        base_calls, base_wall = measure(shape, 1, args.n, args.repeats, latency)
        fast_calls, fast_wall = measure(shape, 32, args.n, args.repeats, latency)
        print(f"{shape:<12} {1:>9} {base_calls:>7g} {base_wall:>8.3f}")
        print(f"{shape:<12} {32:>9} {fast_calls:>7g} {fast_wall:>8.3f}")
        call_ratio, wall_ratio = base_calls / fast_calls, base_wall / fast_wall
        verdict = "meets" if call_ratio >= 20 and wall_ratio >= 5 else "MISSES"
        print(f"  -> {call_ratio:.1f}x fewer calls, {wall_ratio:.1f}x less wall time ({verdict} the 20x / 5x target)")


if __name__ == "__main__":
    main()
