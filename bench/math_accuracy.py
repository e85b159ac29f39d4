"""Accuracy of math-equiv and of math-verify against the labelled corpus, per class, with throughput of both.

    .venv/bin/python bench/math_accuracy.py [--corpus testdata/math_equiv/corpus.jsonl] [--show-misses]

For each verdict source, on the unambiguous pairs and on all pairs: agreement with the label, and the false
positive rate (pairs labelled false that pass, over all pairs labelled false). math-verify is called as reward
functions call it: ``verify(parse(gold), parse(completion))``, the gold wrapped in ``\\boxed{}`` unless it
carries its own math delimiters. evalsi is a fresh evaluator (empty memo; the worker pool already started, as
math-verify is already imported) scoring the whole corpus in one batch.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from evalsi.evaluators import ScoreContext
from evalsi.evaluators.rl.math_equiv import MathEquiv
from evalsi.records import Record

CORPUS = Path(__file__).resolve().parent.parent / "testdata" / "math_equiv" / "corpus.jsonl"


def load(path: Path) -> list[dict[str, Any]]:
    """The corpus rows, one JSON object a line."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def math_verify_gold(gold: str) -> str:
    """The gold as math-verify's users pass it: as written when it has math delimiters, else boxed."""
    return gold if any(mark in gold for mark in ("$", "\\boxed", "\\(", "\\[")) else "\\boxed{" + gold + "}"


def run_math_verify(rows: list[dict[str, Any]]) -> tuple[list[bool], float]:
    """math-verify's verdicts (an exception is a fail) and the seconds they took."""
    from math_verify import parse, verify

    verify(parse("\\boxed{1}"), parse("1"))  # import and first-call costs are not counted
    verdicts: list[bool] = []
    start = time.perf_counter()
    for row in rows:
        try:
            verdicts.append(bool(verify(parse(math_verify_gold(row["gold"])), parse(row["completion"]))))
        except Exception:
            verdicts.append(False)
    return verdicts, time.perf_counter() - start


def run_evalsi(rows: list[dict[str, Any]], params: dict[str, Any]) -> tuple[list[bool], float, list[str]]:
    """evalsi's verdicts, seconds, and reasons, from a fresh evaluator."""
    MathEquiv().score_batch(
        [Record(completion="\\boxed{1}", reference="1")], MathEquiv().parse_params({}), ScoreContext()
    )  # start the worker pool, as math-verify is imported above
    evaluator = MathEquiv()
    parsed = evaluator.parse_params(params)
    records = [Record(completion=row["completion"], reference=row["gold"]) for row in rows]
    start = time.perf_counter()
    scores = evaluator.score_batch(records, parsed, ScoreContext())
    elapsed = time.perf_counter() - start
    return [bool(s.value) for s in scores], elapsed, [s.reason or "" for s in scores]


def rates(rows: list[dict[str, Any]], verdicts: list[bool]) -> tuple[float, float, int, int]:
    """(agreement, false-positive rate, pairs, negatives) of verdicts against the labels."""
    if not rows:
        return float("nan"), float("nan"), 0, 0
    agree = sum(v == r["label"] for r, v in zip(rows, verdicts, strict=True))
    negatives = [v for r, v in zip(rows, verdicts, strict=True) if not r["label"]]
    fp = sum(negatives) / len(negatives) if negatives else 0.0
    return agree / len(rows), fp, len(rows), len(negatives)


def table(rows: list[dict[str, Any]], ours: list[bool], theirs: list[bool]) -> list[str]:
    """The per-class table: unambiguous agreement and false positives of both, then all pairs."""
    by_class: dict[str, list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        by_class[row["class"]].append(index)
    lines = [f"{'class':20} {'n':>5} {'evalsi agree':>13} {'mv agree':>9} {'evalsi FP':>10} {'mv FP':>7}"]

    def line(name: str, indices: list[int]) -> str:
        picked = [rows[i] for i in indices]
        a = rates(picked, [ours[i] for i in indices])
        b = rates(picked, [theirs[i] for i in indices])
        return f"{name:20} {a[2]:5} {a[0]:13.1%} {b[0]:9.1%} {a[1]:10.1%} {b[1]:7.1%}"

    for name in sorted(by_class):
        lines.append(line(name, [i for i in by_class[name] if not rows[i]["ambiguous"]]))
    lines.append(line("ALL unambiguous", [i for i, r in enumerate(rows) if not r["ambiguous"]]))
    lines.append(line("ALL (with ambiguous)", list(range(len(rows)))))
    lines.append(line("ambiguous only", [i for i, r in enumerate(rows) if r["ambiguous"]]))
    return lines


def main() -> None:
    """Run both graders over the corpus and print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--params", default="{}", help="math-equiv params as JSON")
    parser.add_argument("--show-misses", action="store_true", help="list unambiguous pairs evalsi gets wrong")
    parser.add_argument("--no-math-verify", action="store_true")
    parser.add_argument("--quick", action="store_true", help="the corpus's first 40 pairs (a smoke run)")
    args = parser.parse_args()
    rows = load(args.corpus)[:40] if args.quick else load(args.corpus)
    ours, our_time, reasons = run_evalsi(rows, json.loads(args.params))
    if args.no_math_verify:
        theirs, their_time = [False] * len(rows), float("nan")
    else:
        theirs, their_time = run_math_verify(rows)
    print(f"corpus: {len(rows)} pairs ({sum(not r['ambiguous'] for r in rows)} unambiguous), {args.corpus}")
    print("\n".join(table(rows, ours, theirs)))
    print(
        f"throughput on the corpus: evalsi {len(rows) / our_time:,.0f} pairs/s ({our_time:.2f} s), "
        f"math-verify {len(rows) / their_time:,.0f} pairs/s ({their_time:.2f} s), "
        f"ratio {their_time / our_time:.1f}x"
    )
    if args.show_misses:
        for row, verdict, reason in zip(rows, ours, reasons, strict=True):
            if verdict != row["label"] and not row["ambiguous"]:
                print(f"MISS {row['id']} label={row['label']} gold={row['gold'][-60:]!r}\n     {reason[:200]}")
    MathEquiv().close()


if __name__ == "__main__":
    main()
