"""Keeping evaluation records out of training: the records a run evaluates, and a training set without them.

When a RunSpec's dataset is also (part of) the training data, ``separateEvalSamples: true`` says so: the records
the run evaluates (its dataset cut to ``numSamples``) are identified by their pairing key (the record id, else a
hash of prompt and reference), and :func:`exclude_eval_samples` removes the rows with those keys from a training
dataset mapped with the same fields, so a checkpoint is never scored on what it was trained on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from evalsi.errors import SpecError
from evalsi.runs import BoundRun, load_run
from evalsi.runs._datasets import rows_to_items
from evalsi.runs._driver import load_run_items

Rows = TypeVar("Rows")


def _bound(spec: str | Path | BoundRun) -> BoundRun:
    return spec if isinstance(spec, BoundRun) else load_run(spec)


def eval_sample_keys(spec: str | Path | BoundRun) -> set[str]:
    """The pairing keys of the records ``spec`` evaluates (its dataset, cut to ``numSamples``).

    Raises:
        SpecError: The spec does not set ``separateEvalSamples: true`` (its dataset is not shared with training).

    """
    run = _bound(spec)
    if not run.body.separate_eval_samples:
        raise SpecError(
            "set separateEvalSamples: true in the RunSpec to set its records aside from training",
            file=run.spec.source,
            path="spec.separateEvalSamples",
        )
    return {item.key for item in load_run_items(run)}


def exclude_eval_samples(rows: Rows, spec: str | Path | BoundRun) -> Rows:
    r"""``rows`` (a training dataset) without the records ``spec`` evaluates.

    Rows are matched by the run's field mapping (prompt, reference and id columns, prompt template), so a
    training set in the same format as the evaluation dataset works as it is. ``rows`` may be a list of
    mappings, or anything with a ``filter(predicate)`` method over mappings (a Hugging Face ``Dataset``).

    Args:
        rows: The training dataset.
        spec: The RunSpec (a file or a bound run) whose records to leave out.

    Returns:
        The rows left, of ``rows``' own type.

    Example:
        >>> from evalsi.runs import run_from_mapping
        >>> import json, tempfile, pathlib
        >>> data = pathlib.Path(tempfile.mkdtemp()) / "problems.jsonl"
        >>> _ = data.write_text("\n".join(json.dumps({"id": f"p{i}", "prompt": f"{i}+1?", "answer": str(i + 1)})
        ...                                 for i in range(5)))
        >>> run = run_from_mapping({"target": {"callable": "builtins:str"}, "dataset": {"path": str(data)},
        ...                         "numSamples": 2, "separateEvalSamples": True,
        ...                         "evaluators": [{"ref": "exact-match"}]})
        >>> rows = [json.loads(line) for line in data.read_text().splitlines()]
        >>> [row["id"] for row in exclude_eval_samples(rows, run)]
        ['p2', 'p3', 'p4']

    """
    run = _bound(spec)
    excluded = eval_sample_keys(run)
    dataset = run.body.dataset

    def keep(row: Mapping[str, Any]) -> bool:
        return rows_to_items([row], dataset, "the training dataset")[0].key not in excluded

    if isinstance(rows, Sequence) and not isinstance(rows, str | bytes):
        return [row for row in rows if keep(row)]  # type: ignore[return-value]
    filter_rows = getattr(rows, "filter", None)
    if callable(filter_rows):
        return filter_rows(keep)  # type: ignore[no-any-return]
    raise TypeError(f"rows must be a list of mappings or have a filter() method, got {type(rows).__name__}")
