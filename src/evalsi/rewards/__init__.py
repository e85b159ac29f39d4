"""Rewards: RewardSpecs bound to evaluators, the composition rules, and the trainer adapters.

Example:
    >>> import evalsi.rewards
    >>> reward = evalsi.rewards.from_mapping({"components": [{"ref": "exact-match"}]})
    >>> reward.score([{"completion": "4", "answer": "4"}])[0].total
    1.0

"""

from typing import TYPE_CHECKING, Any

from evalsi._util.public import lazy_names, publish
from evalsi.rewards._compose import ComponentRule, RewardResult, RewardStatus, compose_batch, compose_one
from evalsi.rewards._rescore import (
    Change,
    ComponentDiff,
    RescoreReport,
    StoredRollout,
    read_scores,
    rescore,
    score_keys,
    stored_from_scores,
)
from evalsi.rewards._reward import BoundComponent, Reward, bind, bind_component, from_mapping, load
from evalsi.rewards._rollout_files import RowSource, read_rollout_file, write_jsonl
from evalsi.rewards._scorer import clear_shared

if TYPE_CHECKING:
    from evalsi.rewards._remote import RemoteReward

__all__ = [
    "BoundComponent",
    "Change",
    "ComponentDiff",
    "ComponentRule",
    "RemoteReward",
    "RescoreReport",
    "Reward",
    "RewardResult",
    "RewardStatus",
    "RowSource",
    "StoredRollout",
    "bind",
    "bind_component",
    "clear_shared",
    "compose_batch",
    "compose_one",
    "from_mapping",
    "load",
    "read_rollout_file",
    "read_scores",
    "rescore",
    "score_keys",
    "stored_from_scores",
    "write_jsonl",
]

publish(__name__)

_lazy = lazy_names(__name__, {"RemoteReward": "evalsi.rewards._remote"})


def __getattr__(name: str) -> Any:
    """``RemoteReward``, imported on first use: its HTTP client (httpx) costs in-process scoring nothing."""
    return _lazy(name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
