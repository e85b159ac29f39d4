"""math-equiv against the labelled corpus (testdata/math_equiv/corpus.jsonl): accuracy targets and corpus shape.

The corpus holds math-verify's grader test pairs and constructed positives and hard negatives of every failure
class, each labelled by hand; pairs where reasonable graders differ are marked ambiguous and kept apart. The
targets, on the unambiguous pairs: at least 99.5% agreement with the labels, at most 0.3% of the pairs labelled
false passing (a false positive teaches the wrong answer), and at least 98% agreement in every class. A long
worker timeout keeps the assertion about verdicts, not about the machine's speed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalsi.evaluators import ScoreContext
from evalsi.evaluators.rl.math_equiv import MathEquiv
from evalsi.records import Record

pytest.importorskip("math_verify", reason="math-verify is part of evalsi[math]")

CORPUS = Path(__file__).resolve().parents[3] / "testdata" / "math_equiv" / "corpus.jsonl"
COLUMNS = {"id", "class", "gold", "completion", "label", "ambiguous", "note", "source"}
FAILURE_CLASSES = {
    "sig-digits",
    "exact-huge",
    "free-symbols",
    "suffix-words",
    "truncated",
    "multi-box",
    "answer-sentence",
    "thousands-vs-tuple",
    "spellings",
    "equations",
    "intervals",
    "units",
    "expressions",
    "symbolic-slow",
    "equation-sides",
    "bound-indices",
    "log-base",
    "matrix-entries",
    "mixed-numbers",
    "conjunctions",
}


def load() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def verdicts() -> Iterator[tuple[list[dict[str, Any]], list[Any]]]:
    rows = load()
    evaluator = MathEquiv()
    params = evaluator.parse_params({"timeout": 20})
    records = [Record(completion=row["completion"], reference=row["gold"]) for row in rows]
    yield rows, evaluator.score_batch(records, params, ScoreContext())
    evaluator.close()


def test_corpus_shape() -> None:
    rows = load()
    assert len(rows) >= 1000
    assert len({row["id"] for row in rows}) == len(rows)
    for row in rows:
        assert set(row) == COLUMNS, row["id"]
        assert isinstance(row["label"], bool) and isinstance(row["ambiguous"], bool), row["id"]
        assert row["source"], row["id"]
        if row["ambiguous"]:
            assert row["note"], f"{row['id']}: an ambiguous pair says why"
    classes = Counter((row["class"], row["label"]) for row in rows if not row["ambiguous"])
    for name in FAILURE_CLASSES:
        assert classes[(name, True)] > 0 and classes[(name, False)] > 0, f"{name} needs positives and negatives"


@pytest.mark.timeout(900)
def test_agreement_and_false_positives_on_unambiguous_pairs(
    verdicts: tuple[list[dict[str, Any]], list[Any]],
) -> None:
    rows, scores = verdicts
    pairs = [(row, score) for row, score in zip(rows, scores, strict=True) if not row["ambiguous"]]
    wrong = [(row["id"], score.reason) for row, score in pairs if bool(score.value) != row["label"]]
    negatives = [score for row, score in pairs if not row["label"]]
    false_positives = [score for score in negatives if score.value]
    agreement = 1 - len(wrong) / len(pairs)
    assert agreement >= 0.995, wrong
    assert len(false_positives) / len(negatives) <= 0.003, [w for w in wrong if w[0] in {r["id"] for r, _ in pairs}]


@pytest.mark.timeout(900)
def test_every_failure_class_is_mostly_right(verdicts: tuple[list[dict[str, Any]], list[Any]]) -> None:
    rows, scores = verdicts
    by_class: dict[str, list[bool]] = {}
    for row, score in zip(rows, scores, strict=True):
        if not row["ambiguous"]:
            by_class.setdefault(row["class"], []).append(bool(score.value) == row["label"])
    weak = {name: sum(ok) / len(ok) for name, ok in by_class.items() if sum(ok) / len(ok) < 0.98}
    assert weak == {}
