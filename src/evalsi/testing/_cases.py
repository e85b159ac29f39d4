"""The test cases of an evaluation test: one per completion-params entry, or one comparing them all.

In ``pointwise`` and ``all`` mode every entry of ``completion_params`` is its own pytest case, with its own
id, verdict and stored results, as ``pytest.mark.parametrize`` would make it: two checkpoints are never
averaged into one verdict. In ``groupwise`` mode the entries are compared row by row, so they form one case.

A case's id is ``model`` plus every setting in which the entries differ (``policy,base_url=http://b/v1`` when
two endpoints serve the same model name), so no two entries share an id unless they are the same entry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from evalsi.testing._config import EvaluationSetupError, Mode

HIDDEN = frozenset({"headers"})
"""Completion params never shown in an id (they may carry credentials)."""

_MISSING = object()


@dataclass(frozen=True)
class EvaluationCase:
    """One pytest case of an evaluation test: the completion params its rollouts use."""

    label: str
    """The pytest id inside ``[...]``; empty for a test that is a single case (groupwise, or no params)."""
    params: tuple[dict[str, Any], ...]
    """The completion params of its rollouts: one entry, every entry (groupwise), or none (pre-generated)."""
    params_labels: tuple[str, ...]
    """The id of each of ``params`` among all the entries."""


def evaluation_cases(test_id: str, mode: Mode, params: Sequence[Mapping[str, Any]]) -> list[EvaluationCase]:
    """The cases of a test with these completion params (after overrides).

    Raises:
        EvaluationSetupError: Two entries are the same, or groupwise mode has fewer than two.

    """
    entries = [dict(p) for p in params]
    labels = params_labels(test_id, entries)
    if mode == "groupwise":
        if len(entries) < 2:
            raise EvaluationSetupError(f"{test_id}: mode='groupwise' compares two or more completion_params")
        return [EvaluationCase("", tuple(entries), tuple(labels))]
    if not entries:
        return [EvaluationCase("", (), ())]
    return [EvaluationCase(label, (entry,), (label,)) for label, entry in zip(labels, entries, strict=True)]


def params_labels(test_id: str, params: Sequence[Mapping[str, Any]]) -> list[str]:
    """A short, distinct name for each completion-params entry: its model, then the settings that differ.

    Raises:
        EvaluationSetupError: Two entries are the same (the repeat would be one case twice).

    """
    keys = sorted({k for p in params for k in p if k not in HIDDEN and k != "model"})
    differing = [k for k in keys if len({_canonical(p.get(k, _MISSING)) for p in params}) > 1]
    labels: list[str] = []
    first_of: dict[str, int] = {}
    for index, entry in enumerate(params):
        parts = [_show(entry["model"])] if "model" in entry else []
        parts += [f"{k}={_show(entry[k])}" for k in differing if k in entry]
        label = ",".join(parts) or f"completion_params{index}"
        if label in first_of:
            if _canonical(entry) == _canonical(params[first_of[label]]):
                raise EvaluationSetupError(
                    f"{test_id}: completion_params[{first_of[label]}] and completion_params[{index}] are the same "
                    f"({label}); each entry is its own test case, so drop the repeat (num_runs repeats rollouts)"
                )
            label = f"{label}#{index}"  # differing only in what an id does not show (headers, 1 vs "1")
        first_of[label] = index
        labels.append(label)
    return labels


def _canonical(value: Any) -> bytes:
    if value is _MISSING:
        return b"\x00missing"
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=repr)


def _show(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=repr).decode()
