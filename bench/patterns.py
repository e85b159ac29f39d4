"""What linear-time spec patterns cost: RE2 (the default) against Python's ``re`` (the in-process opt-in).

In the same run, for each pattern and text size, the median µs per ``fullmatch`` with each engine, and the
ratio RE2 / ``re``. The ordinary cases are the spec patterns users write (``format-check``'s default, a
``\\boxed{}`` check); the hostile one is ``(a+)+$`` on ``a…ab``, where ``re`` is exponential: it is timed on
``re`` at small sizes only, to show the doubling, and on RE2 at every size.
Run: ``.venv/bin/python bench/patterns.py [--quick]`` (a few seconds; --quick: the smaller sizes).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalsi.evaluators._patterns import _compile

ORDINARY = {
    "format-check default": r"(?s)\s*<think>.*?</think>\s*<answer>.*?</answer>\s*",
    "boxed anywhere": r"(?s).*\\boxed\{.+\}.*",
}


def completion(chars: int) -> str:
    body = "reasoning step. " * max(chars // 16, 1)
    return f"<think>{body}</think><answer>\\boxed{{42}}</answer>"


def median_us(fn: Callable[[str], Any], text: str, rounds: int = 7, calls: int = 50) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            fn(text)
        samples.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the smaller sizes only (a smoke run)")
    quick = parser.parse_args().quick
    print(f"{'pattern':<22} {'chars':>8} {'re µs':>10} {'RE2 µs':>10} {'RE2/re':>8}")
    for name, pattern in ORDINARY.items():
        backtracking, linear = re.compile(pattern), _compile(pattern, python=False)
        for size in (200, 2_000) if quick else (200, 2_000, 20_000, 200_000):
            text = completion(size)
            slow, fast = median_us(backtracking.fullmatch, text), median_us(linear.fullmatch, text)
            print(f"{name:<22} {len(text):>8} {slow:>10.1f} {fast:>10.1f} {fast / slow:>7.2f}x")
    evil = "(a+)+$"
    backtracking, linear = re.compile(evil), _compile(evil, python=False)
    for size in (16, 18, 1_000) if quick else (16, 18, 20, 22, 1_000, 1_000_000):
        text = "a" * size + "b"
        slow = median_us(backtracking.fullmatch, text, rounds=3, calls=1) if size <= 22 else float("nan")
        fast = median_us(linear.fullmatch, text, rounds=3, calls=5)
        ratio = fast / slow if size <= 22 else float("nan")
        print(f"{'(a+)+$ hostile':<22} {len(text):>8} {slow:>10.1f} {fast:>10.1f} {ratio:>7.4f}x")


if __name__ == "__main__":
    main()
