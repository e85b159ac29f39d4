"""Per-rollout overhead of the trainer adapters on top of the engine, against calling ``Reward.score`` directly.

Every component score is cached first (the spec's content cache is warmed by one pass over every batch), so what
is left is the engine's cache-hit path plus whatever the adapter adds: building rollouts from the trainer's
arguments, the TRL batch memo and projections, verl's and OpenRLHF's dict answers. In the same run, alternating
rounds time:

- direct, batch: ``reward.score(rollouts)`` on a batch of 256 (the baseline of the batch adapters);
- TRL: the total and its 3 component functions called on the same batch as GRPOTrainer does (scored once);
- ``Reward`` as a TRL function (``Reward.__call__``);
- verl ``compute_score_batch`` (batch manager);
- direct, one rollout per call: ``reward.score([rollout])`` (the baseline of the per-sample adapters);
- verl ``compute_score`` (naive manager: one call per sample);
- OpenRLHF ``reward_func`` (one sample per call, as SingleTurnAgentExecutor sends them);
- ``evalsi rewards serve``: one-sample HTTP requests on loopback (informational: HTTP is not in-process).

Prints the median µs per rollout and the overhead of each adapter against its baseline: the median of ratios
paired by batch and round, and fastest against fastest (steadier on a shared machine). Target: < 10 %.
Run: ``.venv/bin/python bench/adapter_overhead.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.rewards._servers import ServerThread

from evalsi.rewards import Reward, load
from evalsi.rewards._scorer import shared_scorer
from evalsi.rewards.openrlhf import reward_func
from evalsi.rewards.serve import create_app
from evalsi.rewards.trl import reward_funcs
from evalsi.rewards.verl import compute_score, compute_score_batch

SPEC = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "bench"},
    "spec": {
        "components": [
            {"ref": "format-check", "name": "format", "weight": 0.1},
            {"ref": "exact-match", "name": "exact", "weight": 0.9},
            {"ref": "overlong-penalty", "name": "overlong", "params": {"max_length": 512, "buffer": 128}},
        ],
    },
}
PROMPT = "<|im_start|>user\n" + "Solve the problem step by step. " * 6 + "<|im_end|>\n<|im_start|>assistant\n"


def make_batches(batches: int, size: int) -> list[dict[str, list[Any]]]:
    """TRL-shaped batches (prompts, completions, completion_ids, answer), all distinct."""
    out = []
    for b in range(batches):
        completions = [
            f"<think>{'reasoning ' * 40}{b}-{i}</think><answer>{(b * size + i) % 7}</answer>" for i in range(size)
        ]
        out.append(
            {
                "prompts": [PROMPT] * size,
                "completions": completions,
                "completion_ids": [list(range(300 + i % 50)) for i in range(size)],
                "answer": [str(i % 7) for i in range(size)],
            }
        )
    return out


def as_rollouts(batch: dict[str, list[Any]]) -> list[dict[str, Any]]:
    return [
        {"prompt": p, "completion": c, "completion_ids": ids, "answer": a}
        for p, c, ids, a in zip(
            batch["prompts"], batch["completions"], batch["completion_ids"], batch["answer"], strict=True
        )
    ]


def timed(fn: Callable[[], None], rollouts: int) -> float:
    """µs per rollout of one call of ``fn``."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e6 / rollouts


BASELINES = {
    "TRL reward_funcs (4 funcs)": "direct, batch",
    "TRL Reward as function": "direct, batch",
    "verl compute_score_batch": "direct, batch",
    "verl compute_score": "direct, one per call",
    "OpenRLHF reward_func": "direct, one per call",
}


def build_runs(
    reward: Reward, spec_path: Path, batches: list[dict[str, list[Any]]], singles: list[dict[str, Any]]
) -> dict[str, Callable[[int], float]]:
    """Each path as ``run(batch index) -> µs per rollout``."""
    funcs, _ = reward_funcs(reward)
    rollout_batches = [as_rollouts(b) for b in batches]
    size = len(batches[0]["completions"])
    spec = str(spec_path)
    queries = [(r["prompt"] + r["completion"] + "<|im_end|>", r["prompt"], r["answer"]) for r in singles]

    def trl_step(batch: dict[str, list[Any]]) -> None:
        extras = {"trainer_state": None, "log_extra": None, "log_metric": None}
        for func in funcs:
            func(**batch, **extras)

    def verl_batch(i: int) -> None:
        batch = batches[i]
        compute_score_batch(
            ["gsm8k"] * size, batch["completions"], batch["answer"], [{} for _ in range(size)], spec=spec
        )

    return {
        "direct, batch": lambda i: timed(lambda: reward.score(rollout_batches[i]), size),
        "TRL reward_funcs (4 funcs)": lambda i: timed(lambda: trl_step(batches[i]), size),
        "TRL Reward as function": lambda i: timed(lambda: reward(**batches[i]), size),
        "verl compute_score_batch": lambda i: timed(lambda: verl_batch(i), size),
        "direct, one per call": lambda i: timed(lambda: [reward.score([r]) for r in singles], len(singles)),
        "verl compute_score": lambda i: timed(
            lambda: [compute_score("gsm8k", r["completion"], r["answer"], {}, spec=spec) for r in singles], len(singles)
        ),
        "OpenRLHF reward_func": lambda i: timed(
            lambda: [reward_func([q], [p], [a]) for q, p, a in queries], len(singles)
        ),
    }


def measure(
    runs: dict[str, Callable[[int], float]], batches: int, rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Samples of every path, and each adapter's ratios paired with its baseline (same batch, same round)."""
    for i in range(batches):  # warm the cache and every code path
        for run in runs.values():
            run(i)
    samples: dict[str, list[float]] = {name: [] for name in runs}
    ratios: dict[str, list[float]] = {name: [] for name in BASELINES}
    for round_ in range(rounds):
        for i in range(batches):
            times = {name: run((i + round_) % batches) for name, run in runs.items()}
            for name, value in times.items():
                samples[name].append(value)
            # paired with its baseline on the same batch in the same round: drift on a shared machine cancels
            for name, base in BASELINES.items():
                ratios[name].append(times[name] / times[base])
    return samples, ratios


def http_one_sample(spec_path: Path, singles: list[dict[str, Any]]) -> float:
    """Median µs per one-sample request to ``evalsi rewards serve``'s app on loopback."""
    body = [
        {"query": [r["prompt"] + r["completion"]], "prompts": [r["prompt"]], "labels": [r["answer"]]} for r in singles
    ]
    with ServerThread(create_app(load(spec_path))) as server, httpx.Client() as client:
        for payload in body:
            client.post(server.url + "/get_reward", json=payload)
        return statistics.median(
            timed(lambda: [client.post(server.url + "/get_reward", json=b) for b in body], len(body)) for _ in range(3)
        )


def report(samples: dict[str, list[float]], ratios: dict[str, list[float]], http: float) -> None:
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print("overhead: median of ratios paired with the baseline (same batch, same round); best: fastest vs fastest")
    print(f"{'path':32} {'µs/rollout':>11} {'overhead':>9} {'best':>8}")
    for name, median in medians.items():
        if name in ratios:
            paired = f"{(statistics.median(ratios[name]) - 1) * 100:+8.1f}%"
            best = f"{(min(samples[name]) / min(samples[BASELINES[name]]) - 1) * 100:+7.1f}%"
        else:
            paired, best = f"{'(base)':>9}", ""
        print(f"{name:32} {median:11.1f} {paired} {best}")
    print(
        f"{'serve, HTTP one-sample request':32} {http:11.1f} "
        f"{http / medians['direct, one per call']:8.1f}x  (loopback HTTP round trip, informational)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=8, help="distinct batches (more than the TRL memo holds)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--singles", type=int, default=256, help="rollouts per round for the per-sample adapters")
    parser.add_argument("--quick", action="store_true", help="a few small batches, one round (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.batch, args.batches, args.rounds, args.singles = 16, 2, 1, 16

    spec_path = Path(tempfile.mkdtemp()) / "bench.yaml"
    spec_path.write_text(yaml.safe_dump(SPEC))
    os.environ["EVALSI_REWARD_SPEC"] = str(spec_path)
    # One Reward for every path (the one the file-loaded adapters share): same object, same cache, same threads.
    reward = shared_scorer(str(spec_path))
    assert isinstance(reward, Reward)
    batches = make_batches(args.batches, args.batch)
    singles = [r for batch in batches for r in as_rollouts(batch)][: args.singles]
    samples, ratios = measure(build_runs(reward, spec_path, batches, singles), args.batches, args.rounds)
    http = http_one_sample(spec_path, singles)
    print(f"batch {args.batch}, {args.batches} distinct batches, {args.rounds} rounds; cache-hit scoring")
    report(samples, ratios, http)


if __name__ == "__main__":
    main()
