"""separateEvalSamples: the records a run evaluates are set aside from a training dataset, matched by pairing key."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalsi.errors import SpecError
from evalsi.training import exclude_eval_samples
from evalsi.training._separate import eval_sample_keys

ROWS = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(6)]


def write_spec(tmp_path: Path, **body: Any) -> Path:
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS))
    spec = {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RunSpec",
        "metadata": {"name": "held-out"},
        "spec": {
            "target": {"callable": "builtins:str"},
            "dataset": {"path": "train.jsonl", "fields": {"prompt": "question"}},
            "evaluators": [{"ref": "exact-match"}],
            **body,
        },
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_rows_without_ids_are_matched_by_content(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, numSamples=2, separateEvalSamples=True)
    kept = exclude_eval_samples([dict(r) for r in reversed(ROWS)], spec)
    assert [r["answer"] for r in kept] == ["10", "8", "6", "4"]  # rows 0 and 1 are evaluated, so left out
    assert len(eval_sample_keys(spec)) == 2


def test_a_changed_reference_is_a_different_record(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, numSamples=1, separateEvalSamples=True)
    edited = [{"question": ROWS[0]["question"], "answer": "wrong"}, ROWS[1]]
    assert exclude_eval_samples(edited, spec) == edited


class FilterableDataset:
    """Anything with ``filter(predicate)`` over mappings, as a Hugging Face Dataset has."""

    def __init__(self, rows: list[Mapping[str, Any]]) -> None:
        self.rows = rows

    def filter(self, predicate: Callable[[Mapping[str, Any]], bool]) -> FilterableDataset:
        return FilterableDataset([r for r in self.rows if predicate(r)])


def test_datasets_with_a_filter_method_are_filtered_the_same_way(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, numSamples=3, separateEvalSamples=True)
    kept = exclude_eval_samples(FilterableDataset(list(ROWS)), spec)
    assert isinstance(kept, FilterableDataset)
    assert [r["answer"] for r in kept.rows] == ["6", "8", "10"]


def test_a_spec_that_does_not_separate_its_samples_is_refused(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, numSamples=2)
    with pytest.raises(SpecError, match=r"run\.yaml.*separateEvalSamples: true"):
        exclude_eval_samples(list(ROWS), spec)
