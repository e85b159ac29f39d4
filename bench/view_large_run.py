"""Opening a large run in ``evalsi view``: 100,000 records, served over loopback HTTP by the real app.

Generates a results file with evalsi's own results writer and summary (``--records`` records of ``--samples``
samples, two metrics, prompts and completions of a few hundred characters), serves it with uvicorn on
127.0.0.1, and times, in the same run:

- baseline: ``orjson.loads`` of the file (the floor of any reader) and ``evalsi.runs.load_results`` (what
  ``evalsi compare`` does);
- the run list (reads only the header before the records);
- opening the run page cold (the header parsed, the records located, the first page rendered), then warm;
- the first sort after opening (waits for the row index, built once the first page is sent);
- sorting by a metric, filtering by a metric value, text searches (the first may wait for the search text), a page
  deep in the table, and one record's drill-down.

Prints each time and its ratio to the ``orjson.loads`` baseline. Target: the cold open under 1 s.
Each round serves the file from a fresh app (nothing cached in the viewer; the OS page cache stays warm).
Run: ``.venv/bin/python bench/view_large_run.py`` (about a minute; ``--records 10000`` for a quick look).
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.rewards._servers import ServerThread

from evalsi.evaluators import Score
from evalsi.runs import MetricInfo, RecordResult, SampleResult, load_results
from evalsi.runs._results import ResultsWriter
from evalsi.runs._summary import summarize
from evalsi.specs import GateSpec, PassKSpec
from evalsi.view import create_app

WORDS = [
    "the",
    "of",
    "a",
    "number",
    "answer",
    "total",
    "each",
    "sum",
    "step",
    "so",
    "we",
    "find",
    "then",
    "value",
    "equals",
    "result",
    "check",
]


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def generate(path: Path, records: int, samples: int) -> None:
    rng = random.Random(0)
    out = []
    for i in range(records):
        sample_list = []
        for s in range(samples):
            correct = rng.random() < 0.6
            scores = {
                "acc": Score(correct, "ok", "matches" if correct else "differs"),
                "len": Score(rng.random(), "ok" if rng.random() > 0.01 else "error", None),
            }
            sample_list.append(
                SampleResult(f"{text(rng, 40)} \\boxed{{{i + s}}}", "stop", rng.randint(20, 400), rng.random(), scores)
            )
        out.append(RecordResult(f"k{i}", i, f"Problem {i}: {text(rng, 30)}", str(i), f"q{i}", sample_list))
    metrics = [MetricInfo("acc"), MetricInfo("len", 0.5)]
    pass_k = PassKSpec.model_validate({"atK": {"metrics": ["acc"], "k": [1]}})
    gates = [GateSpec.model_validate({"metric": "acc", "min": 0.5})]
    header = {
        "name": "large",
        "spec": {"target": {"model": "bench"}},
        "target": {"model": "bench"},
        "fingerprints": {"generation": "g", "scoring": "s"},
        "metrics": [{"name": "acc", "threshold": 1.0}, {"name": "len", "threshold": 0.5}],
        "onError": "zero",
    }
    summary = summarize(out, metrics, pass_k, gates, "zero").to_dict()
    ResultsWriter(path, header).write(out, status="complete", extra={"summary": summary, "timings": {}})


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(http: httpx.Client, url: str, records: int) -> list[tuple[str, float]]:
    """Time the table's operations on an opened run of ``records`` records whose row index is built."""

    def get(path: str, **params: str) -> None:
        http.get(path, params=params).raise_for_status()

    rows = [("open run page, warm", min(timed(lambda: get(url)) for _ in range(3)))]
    for label, params in [
        ("sort by acc, descending", {"sort": "acc", "desc": "1"}),
        ("filter len >= 0.9", {"metric": "len", "op": "ge", "value": "0.9"}),
        ("status error", {"status": "error"}),
        ("first text search (search text built after the index)", {"q": "problem 4242:"}),
        ("another text search", {"q": "problem 777:"}),
        ("page 1000, 100 a page", {"page": "1000", "size": "100"}),
    ]:
        rows.append((label, timed(lambda p=params: get(url, **p))))  # type: ignore[misc]
    rows.append(("record drill-down", timed(lambda: get(f"{url}/records/{min(5000, records // 2)}"))))
    rows.append(("records API, sorted page (JSON)", timed(lambda: get(f"/api{url}/records", sort="len"))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="Cold opens to time (a fresh app each).")
    parser.add_argument("--quick", action="store_true", help="a small run, one cold open (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.records, args.rounds = 1_000, 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "large.results.json"
        t = timed(lambda: generate(path, args.records, args.samples))
        size = path.stat().st_size / 1e6
        print(f"{args.records:,} records x {args.samples} samples: {size:.0f} MB (generated in {t:.1f} s)")
        base = min(timed(lambda: orjson.loads(path.read_bytes())) for _ in range(3))
        load = min(timed(lambda: load_results(path)) for _ in range(2))
        rows: list[tuple[str, float]] = [("orjson.loads (baseline)", base), ("evalsi.runs.load_results", load)]
        cold: list[float] = []
        first_sort: list[float] = []
        for round_ in range(args.rounds):
            with ServerThread(create_app([tmp])) as server, httpx.Client(base_url=server.url, timeout=300) as http:
                listed = timed(lambda: http.get("/").raise_for_status())
                found = re.search(r'href="/runs/([0-9a-f]{12})"', http.get("/").text)
                assert found is not None
                url = f"/runs/{found.group(1)}"
                cold.append(timed(lambda u=url: http.get(u).raise_for_status()))  # type: ignore[misc]
                # the row index is built after the page is sent; the first sort waits for it
                first_sort.append(timed(lambda u=url: http.get(u, params={"sort": "acc"}).raise_for_status()))  # type: ignore[misc]
                if round_ == args.rounds - 1:
                    rows.append(("run list (header only)", listed))
                    rows += measure(http, url, args.records)
        rows[2:2] = [
            (f"open run page, cold (best of {len(cold)})", min(cold)),
            (f"open run page, cold (worst of {len(cold)})", max(cold)),
            (f"first sort after opening (best of {len(cold)})", min(first_sort)),
            (f"first sort after opening (worst of {len(cold)})", max(first_sort)),
        ]
        print(f"{'':56} {'seconds':>9} {'x baseline':>11}")
        for label, seconds in rows:
            print(f"{label:56} {seconds:9.3f} {seconds / base:10.1f}x")


if __name__ == "__main__":
    main()
