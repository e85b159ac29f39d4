"""evalsi: evaluators as RL rewards, sandboxed code tests, and checkpoint evaluation.

The main entry points::

    import evalsi
    reward = evalsi.rewards.load("reward.yaml")
    results = reward.score(rollouts)

The names below are imported on first use: ``import evalsi.evaluators.rl.math_equiv`` (a reward function, or the
worker processes that compare math answers) does not pay for the reward engine, the HTTP clients and the spec
loader it never touches.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_SUBMODULES = frozenset({"errors", "evaluators", "records", "rewards", "specs"})
_NAMES = {
    "Evaluator": "evalsi.evaluators",
    "Params": "evalsi.evaluators",
    "Score": "evalsi.evaluators",
    "register": "evalsi.evaluators",
    "Record": "evalsi.records",
    "from_rollout": "evalsi.records",
    "Reward": "evalsi.rewards",
    "RewardResult": "evalsi.rewards",
}


def __getattr__(name: str) -> Any:
    """Import a public submodule or name on first access (PEP 562), then keep it as a module attribute."""
    if name in _SUBMODULES:
        value: Any = importlib.import_module(f"evalsi.{name}")
    elif name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
    else:
        raise AttributeError(f"module 'evalsi' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
