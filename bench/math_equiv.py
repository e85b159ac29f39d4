"""Benchmark: math-equiv against math-verify's own parse+verify on a realistic GRPO-style mix.

    .venv/bin/python bench/math_equiv.py [--prompts 700] [--per-prompt 8] [--mv-sample 1200] [--seed 0]

The mix: GSM8K-style word problems (``#### x``, boxed, "the answer is"), fractions and decimals, LaTeX
expressions, sets/intervals/tuples, percentages/units/degrees; several rollouts per prompt that repeat answers
in different words, as GRPO's n samples do; about a third wrong. In one run it measures:

1. math-verify: ``verify(parse("\\boxed{gold}"), parse(completion))`` serially (how reward functions call it),
   on a fixed random sample of ``--mv-sample`` rollouts, extrapolated to rollouts/s (the whole mix would take
   minutes); also the agreement of evalsi's verdicts with math-verify's on that sample;
2. evalsi cold: a fresh evaluator (empty memo, no score cache) scoring the whole mix in batches of
   ``--batch`` (the worker pool already started, as math-verify is already imported);
3. evalsi warm: the full reward path, ``evalsi.rewards.from_mapping({"components": [{"ref": "math-equiv"}]})``,
   scoring the same rollouts twice and timing the second pass (every score a cache hit).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from typing import Any

from evalsi.evaluators import ScoreContext, get_evaluator
from evalsi.evaluators.rl.math_equiv import MathEquiv
from evalsi.records import from_rollout

FILLER = (
    "First, let's understand what the problem asks. We are told that {a} items are split into groups of {b}, "
    "so there are {a} / {b} = {c} groups. Next we account for the remaining part of the question. "
    "Adding the two contributions gives {d} + {e} = {f}. Let me double check this computation: "
    "{d} plus {e} is indeed {f}. "
)


def _reasoning(rng: random.Random) -> str:
    a, b = rng.randint(10, 500), rng.randint(2, 9)
    d, e = rng.randint(1, 300), rng.randint(1, 300)
    return FILLER.format(a=a, b=b, c=round(a / b, 2), d=d, e=e, f=d + e) * rng.randint(1, 3)


def _wrap(rng: random.Random, answer: str, gsm: bool) -> str:
    """A completion ending in ``answer``: LaTeX styles get it as written, plain-text styles as plain text."""
    body = _reasoning(rng)
    latex = [
        "Therefore, the final answer is $\\boxed{%s}$.",
        "So the answer is $\\boxed{%s}$.",
        "\\[\\boxed{%s}\\]",
        "The answer is $%s$.",
    ]
    plain = ["So in total it is %s.\n#### %s", "#### %s", "The answer is %s."] if gsm else []
    style = rng.choice(latex + plain)
    if style in plain:
        answer = answer.replace("\\$", "$").replace("\\text{ dollars}", " dollars")
        if "####" in style:
            answer = answer.replace("$", "").replace(" dollars", "")  # GSM8K's own format: a bare number
    return body + style.replace("%s", answer)


def _gsm(rng: random.Random) -> tuple[str, list[str], list[str]]:
    gold = rng.choice([rng.randint(2, 999), rng.randint(1000, 99999)])
    right = [str(gold), f"{gold:,}", f"{gold}.00" if rng.random() < 0.5 else f"\\${gold}", f"{gold}\\text{{ dollars}}"]
    wrong = [str(gold + rng.choice([-10, -1, 1, 2, 100])), str(gold * 2), f"{gold / 3:.2f}"]
    return str(gold), right, wrong


def _fraction(rng: random.Random) -> tuple[str, list[str], list[str]]:
    a, b = rng.randint(1, 20), rng.choice([2, 3, 4, 5, 6, 7, 8, 9, 11, 12])
    while a % b == 0:
        a += 1
    gold = f"\\frac{{{a}}}{{{b}}}"
    k = rng.randint(2, 4)
    right = [gold, f"\\dfrac{{{a}}}{{{b}}}", f"\\frac{{{a * k}}}{{{b * k}}}", f"{a}/{b}"]
    if 10**6 % b == 0 or b in (3, 6, 7, 9, 11, 12):
        right.append(f"{a / b:.6f}".rstrip("0") if 10**6 % b == 0 else f"{a / b:.6f}")
    wrong = [f"\\frac{{{b}}}{{{a}}}", f"\\frac{{{a + 1}}}{{{b}}}", f"{a / b:.2f}"]
    return gold, right, wrong


_EXPRESSIONS = [
    ("2\\sqrt{3}", ["2\\sqrt{3}", "\\sqrt{12}", "2 \\sqrt 3"], ["3\\sqrt{2}", "\\sqrt{6}"]),
    ("\\frac{\\pi}{4}", ["\\frac{\\pi}{4}", "\\dfrac{\\pi}{4}", "\\frac{1}{4}\\pi"], ["\\frac{\\pi}{2}", "\\pi"]),
    ("x^2-1", ["x^2-1", "x^2 - 1", "(x-1)(x+1)"], ["x^2+1", "(x-1)^2"]),
    ("\\frac{\\sqrt{2}}{2}", ["\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt2}{2}"], ["\\sqrt{2}"]),
    ("3+2\\sqrt{2}", ["3+2\\sqrt{2}", "2\\sqrt{2}+3", "(1+\\sqrt{2})^2"], ["3-2\\sqrt{2}", "5"]),
    ("\\frac{5}{2}\\pi", ["\\frac{5\\pi}{2}", "\\frac{5}{2}\\pi", "2.5\\pi"], ["\\frac{5}{2}", "5\\pi"]),
    ("2x+3", ["2x+3", "3+2x", "2 x + 3"], ["2x-3", "x+3"]),
]
_GROUPS = [
    ("(1,2]", ["(1,2]", "(1, 2]", "\\left(1,2\\right]"], ["(1,2)", "[1,2]"]),
    ("\\{-2,3\\}", ["\\{-2,3\\}", "\\{3,-2\\}", "\\{3, -2\\}"], ["\\{2,3\\}", "\\{-3,2\\}"]),
    ("(2,-1)", ["(2,-1)", "(2, -1)", "\\left(2,-1\\right)"], ["(-1,2)", "(2,1)"]),
    ("(-\\infty,4)", ["(-\\infty,4)", "(-\\infty, 4)"], ["(-\\infty,4]", "(4,\\infty)"]),
    ("(3,4,5)", ["(3,4,5)", "(3, 4, 5)"], ["(5,4,3)", "(3,4)"]),
]
_PERCENT = [
    ("25", ["25\\%", "25"], ["75\\%", "0.75"]),
    ("0.4", ["40\\%", "0.4", "\\frac{2}{5}"], ["4\\%", "0.04"]),
    ("30", ["30^\\circ", "30^{\\circ}", "30"], ["60^\\circ"]),
    ("12", ["12\\text{ cm}", "12 \\text{cm}", "12"], ["24\\text{ cm}"]),
]


def make_rollouts(prompts: int, per_prompt: int, seed: int) -> list[dict[str, Any]]:
    """A deterministic GRPO-style mix: per prompt a few candidate answers, each repeated across rollouts."""
    rng = random.Random(seed)
    rollouts: list[dict[str, Any]] = []
    for index in range(prompts):
        kind = rng.choices(["gsm", "fraction", "expression", "group", "percent"], [50, 15, 15, 10, 10])[0]
        if kind == "gsm":
            gold, right, wrong = _gsm(rng)
        elif kind == "fraction":
            gold, right, wrong = _fraction(rng)
        else:
            table = {"expression": _EXPRESSIONS, "group": _GROUPS, "percent": _PERCENT}[kind]
            gold, right, wrong = rng.choice(table)
        # GRPO: the policy's n samples concentrate on a few answers.
        candidates = rng.sample(right, min(2, len(right))) + rng.sample(wrong, 1)
        weights = [0.5, 0.2, 0.3]
        for _ in range(per_prompt):
            answer = rng.choices(candidates, weights[: len(candidates)])[0]
            rollouts.append(
                {
                    "prompt": f"problem {index} ({kind})",
                    "completion": _wrap(rng, answer, kind == "gsm"),
                    "answer": gold,
                    "kind": kind,
                }
            )
    return rollouts


def bench_math_verify(rollouts: list[dict[str, Any]], sample: list[int]) -> tuple[float, dict[int, bool], list[float]]:
    from math_verify import parse, verify

    verify(parse("\\boxed{1}"), parse("1"))  # import and first-call costs are not counted
    verdicts: dict[int, bool] = {}
    times: list[float] = []
    start = time.perf_counter()
    for i in sample:
        t = time.perf_counter()
        verdicts[i] = bool(verify(parse("\\boxed{" + rollouts[i]["answer"] + "}"), parse(rollouts[i]["completion"])))
        times.append(time.perf_counter() - t)
    return time.perf_counter() - start, verdicts, times


def bench_cold(rollouts: list[dict[str, Any]], batch: int) -> tuple[float, list[Any]]:
    records = [from_rollout(r) for r in rollouts]
    evaluator = MathEquiv()  # fresh: empty memo and reference table
    params = evaluator.parse_params({})
    start = time.perf_counter()
    scores: list[Any] = []
    for offset in range(0, len(records), batch):
        scores += evaluator.score_batch(records[offset : offset + batch], params, ScoreContext())
    return time.perf_counter() - start, scores


def bench_warm(rollouts: list[dict[str, Any]]) -> tuple[float, float]:
    import evalsi.rewards

    reward = evalsi.rewards.from_mapping({"components": [{"ref": "math-equiv"}]})
    plain = [{k: v for k, v in r.items() if k != "kind"} for r in rollouts]
    start = time.perf_counter()
    reward.score(plain)
    first = time.perf_counter() - start
    start = time.perf_counter()
    reward.score(plain)
    return first, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=700)
    parser.add_argument("--per-prompt", type=int, default=8)
    parser.add_argument("--mv-sample", type=int, default=1200, help="rollouts math-verify is timed on")
    parser.add_argument("--batch", type=int, default=1024, help="evalsi batch size (a GRPO step's rollouts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile-warm", action="store_true", help="cProfile the warm reward path")
    parser.add_argument("--quick", action="store_true", help="a few prompts (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.prompts, args.per_prompt, args.mv_sample, args.batch = 24, 4, 48, 48

    rollouts = make_rollouts(args.prompts, args.per_prompt, args.seed)
    n = len(rollouts)
    kinds = {k: sum(r["kind"] == k for r in rollouts) for k in ("gsm", "fraction", "expression", "group", "percent")}
    print(f"mix: {n} rollouts, {args.prompts} prompts x {args.per_prompt}; {kinds}")

    start = time.perf_counter()
    warm_up = get_evaluator("math-equiv")
    warm_up.score_batch(
        [from_rollout({"completion": "\\boxed{\\sqrt{4}}", "answer": "2"})], warm_up.parse_params({}), ScoreContext()
    )
    print(f"worker pool start (once per process, not counted below): {time.perf_counter() - start:.2f} s")

    sample = sorted(random.Random(args.seed + 1).sample(range(n), min(args.mv_sample, n)))
    mv_time, mv_verdicts, mv_times = bench_math_verify(rollouts, sample)
    mv_rate = len(sample) / mv_time
    print(
        f"math-verify parse+verify: {mv_rate:,.0f} rollouts/s (timed on a random sample of {len(sample)} of "
        f"{n}, extrapolated: {n / mv_rate:.1f} s for all); per rollout median "
        f"{statistics.median(mv_times) * 1e3:.2f} ms, p99 {sorted(mv_times)[int(len(mv_times) * 0.99)] * 1e3:.1f} ms"
    )

    cold_time, scores = bench_cold(rollouts, args.batch)
    cold_rate = n / cold_time
    methods: dict[str, int] = {}
    for s in scores:
        method = (s.details or {}).get("method", "no answer")
        key = "symbolic" if method.startswith(("math-verify", "symbolic", "sympy")) else method
        methods[key] = methods.get(key, 0) + 1
    print(
        f"evalsi cold (fresh evaluator, no cache): {cold_rate:,.0f} rollouts/s ({cold_time:.2f} s), "
        f"{cold_rate / mv_rate:.1f}x math-verify; decided by: {methods}"
    )

    agree = [mv_verdicts[i] == bool(scores[i].value) for i in sample]
    print(
        f"agreement with math-verify on the sample: {sum(agree)}/{len(agree)} = {sum(agree) / len(agree):.2%}; "
        f"pass rate evalsi {sum(bool(scores[i].value) for i in sample) / len(sample):.1%}, "
        f"math-verify {sum(mv_verdicts.values()) / len(sample):.1%}"
    )
    for i in [i for i, ok in zip(sample, agree, strict=True) if not ok][:8]:
        print(
            f"  differs: gold {rollouts[i]['answer']!r} evalsi={scores[i].value} math-verify={mv_verdicts[i]}: "
            f"{scores[i].reason}"
        )

    first, second = bench_warm(rollouts)
    warm_rate = n / second
    print(
        f"evalsi reward path: first pass {n / first:,.0f} rollouts/s; warm cache {warm_rate:,.0f} rollouts/s "
        f"({second * 1e6 / n:.1f} us/rollout), {warm_rate / mv_rate:.0f}x math-verify"
    )
    print(
        f"targets: cold >= 5x math-verify: {'met' if cold_rate >= 5 * mv_rate else 'MISSED'}; "
        f"warm >= 50,000/s: {'met' if warm_rate >= 50_000 else 'MISSED'}"
    )
    if args.profile_warm:
        _profile_warm(rollouts)
    warm_up.close()
    return 0


def _profile_warm(rollouts: list[dict[str, Any]]) -> None:
    import cProfile
    import pstats

    import evalsi.rewards

    reward = evalsi.rewards.from_mapping({"components": [{"ref": "math-equiv"}]})
    plain = [{k: v for k, v in r.items() if k != "kind"} for r in rollouts]
    reward.score(plain)
    profiler = cProfile.Profile()
    profiler.enable()
    reward.score(plain)
    profiler.disable()
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    sys.exit(main())
