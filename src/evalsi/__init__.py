"""evalsi: evaluators as RL rewards, sandboxed code tests, and checkpoint evaluation.

The main entry points::

    import evalsi
    reward = evalsi.rewards.load("reward.yaml")
    results = reward.score(rollouts)
"""

from evalsi import errors, evaluators, records, rewards, specs
from evalsi.evaluators import Evaluator, Params, Score, register
from evalsi.records import Record, from_rollout
from evalsi.rewards import Reward, RewardResult

__all__ = [
    "Evaluator",
    "Params",
    "Record",
    "Reward",
    "RewardResult",
    "Score",
    "errors",
    "evaluators",
    "from_rollout",
    "records",
    "register",
    "rewards",
    "specs",
]

__version__ = "0.1.0"
