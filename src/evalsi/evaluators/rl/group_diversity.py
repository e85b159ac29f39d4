"""``group-diversity``: penalise completions duplicated within their group (GRPO learns nothing from copies)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from evalsi.evaluators._base import ScoreContext
from evalsi.evaluators._group import GroupEvaluator, GroupParams
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import Score
from evalsi.records import Record

_SPACE = re.compile(r"\s+")


class GroupDiversityParams(GroupParams):
    """How completions are compared, and which field makes a group."""

    normalize: bool = True
    """Compare completions with case folded and runs of whitespace collapsed; false: exactly as written."""


def comparable(text: str, normalize: bool) -> str:
    """The form in which two completions are compared."""
    return _SPACE.sub(" ", text).strip().casefold() if normalize else text


@register
class GroupDiversity(GroupEvaluator[GroupDiversityParams]):
    """``1 / k`` for a completion that ``k`` rollouts of its group share: 1.0 when unique, 0.5 for a pair, ..."""

    name = "group-diversity"
    summary = "1/k for a completion shared by k rollouts of its group (1.0 when unique): penalises duplicates."
    params_model = GroupDiversityParams
    reads = ("completion", "prompt", "metadata")
    pack = "rl"

    def score_group(self, records: Sequence[Record], params: GroupDiversityParams, ctx: ScoreContext) -> list[Score]:
        """Each rollout's share of its completion among the group's."""
        texts = [comparable(r.completion_text, params.normalize) for r in records]
        counts = Counter(texts)
        size = len(records)
        out: list[Score] = []
        for text in texts:
            shared = counts[text]
            reason = (
                f"unique in its group of {size}"
                if shared == 1
                else f"the same completion as {shared - 1} other(s) of its group of {size}"
            )
            out.append(Score.ok(1.0 / shared, reason))
        return out
