"""Rewards: RewardSpecs bound to evaluators, the composition rules, and the trainer adapters.

Example:
    >>> import evalsi.rewards
    >>> reward = evalsi.rewards.from_mapping({"components": [{"ref": "exact-match"}]})
    >>> reward.score([{"completion": "4", "answer": "4"}])[0].total
    1.0

"""

from evalsi._util.public import publish
from evalsi.rewards._compose import ComponentRule, RewardResult, RewardStatus, compose_batch, compose_one
from evalsi.rewards._remote import RemoteReward
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
