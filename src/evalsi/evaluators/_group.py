"""Group-level evaluators: each rollout is scored against the other rollouts of its group.

GRPO-style trainers sample several completions per prompt; a component such as diversity or "best of group"
needs the whole group to score one rollout. A :class:`GroupEvaluator` implements :meth:`GroupEvaluator.score_group`
and is handed each group of the batch (rollouts sharing the value of its ``group_by`` field: by default
``metadata.group_id`` when the rollout has one, else the prompt). Its scores depend on the other rollouts, so the
engine neither caches them nor merges identical rollouts before calling it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import Field

from evalsi.evaluators._base import Evaluator, Params, ScoreContext
from evalsi.evaluators._score import Score
from evalsi.records import Record, canonical_json

DEFAULT_GROUP_FIELD = "metadata.group_id"
"""The group id read first when ``group_by`` is not set (then the prompt)."""


class GroupParams(Params):
    """Params every group-level evaluator takes: which field makes a group."""

    group_by: str | None = Field(default=None, min_length=1)
    """The rollout field shared by a group: ``prompt``, ``reference`` or ``metadata.<key>`` (a verl ``index`` or
    ``uid`` in ``extra_info``). Unset: ``metadata.group_id`` when the rollout has it, else the prompt."""


G = TypeVar("G", bound=GroupParams)


class GroupEvaluator(Evaluator[G]):
    """Base class of group-level evaluators: implement :meth:`score_group`."""

    scope: ClassVar[Literal["record", "dataset", "group"]] = "group"
    params_model: ClassVar[type[Params]] = GroupParams

    def score_group(self, records: Sequence[Record], params: G, ctx: ScoreContext) -> list[Score]:
        """One score per record of one group, in order.

        Args:
            records: The rollouts of one group (same prompt).
            params: The component's validated params.
            ctx: Per-call context (cancellation, deadlines, the pools to use).

        """
        raise NotImplementedError(f"{type(self).__name__} does not implement score_group")

    def score_batch(self, records: Sequence[Record], params: G, ctx: ScoreContext) -> list[Score]:
        """Split the batch into its groups and score each; a group that fails errors its own rollouts only.

        A rollout without the group field is skipped, with the reason naming what to set.

        Args:
            records: The records to score, groups in any order.
            params: The component's validated params.
            ctx: Per-call context (cancellation, deadlines, the pools to use).

        """
        out: list[Score | None] = [None] * len(records)
        for key, positions in group_positions(records, params.group_by).items():
            if key is None:
                reason = missing_group_reason(params.group_by)
                for position in positions:
                    out[position] = Score.skipped(reason)
                continue
            members = [records[p] for p in positions]
            try:
                scores = self.score_group(members, params, ctx)
                if len(scores) != len(members):
                    raise ValueError(f"returned {len(scores)} scores for a group of {len(members)}")
            except Exception as exc:  # a failed group is data: its rollouts error, the others stand
                scores = [Score.error(f"{self.name} failed on a group: {type(exc).__name__}: {exc}")] * len(members)
            for position, score in zip(positions, scores, strict=True):
                out[position] = score
        return [s if s is not None else Score.error("internal: rollout in no group") for s in out]


def group_of(record: Record, group_by: str | None) -> bytes | None:
    """The key of the record's group, or None when it has no value for the group field."""
    if group_by is None:
        value: Any = record.metadata.get(DEFAULT_GROUP_FIELD.removeprefix("metadata."))
        if value is None:
            value = record.prompt
    else:
        value = record.get(group_by) if _is_field(group_by) else record.metadata.get(group_by)
    return None if value is None else canonical_json(value)


def group_positions(records: Sequence[Record], group_by: str | None) -> dict[bytes | None, list[int]]:
    """Positions of the records of each group, groups in order of first appearance."""
    groups: dict[bytes | None, list[int]] = {}
    for position, record in enumerate(records):
        groups.setdefault(group_of(record, group_by), []).append(position)
    return groups


def missing_group_reason(group_by: str | None) -> str:
    """Why a rollout is in no group, and what to set."""
    if group_by is None:
        return (
            "the rollout has no group_id and no prompt, so its group is unknown; set params.group_by to a field "
            "its group shares (e.g. metadata.index)"
        )
    return f"the rollout has no {group_by!r}, so its group is unknown; set params.group_by to a field it has"


_RECORD_FIELDS = frozenset({"prompt", "reference", "id", "completion"})


def _is_field(name: str) -> bool:
    return name in _RECORD_FIELDS or name.startswith("metadata.")
