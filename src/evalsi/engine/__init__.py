"""The scoring engine: the score cache, and running components over batches of records (with their pools).

Every entry point (the library, trainer adapters, ``rewards serve``, the server, runs) scores through
:func:`score_components`, usually by way of :meth:`evalsi.rewards.Reward.component_scores`.
"""

from evalsi._util.public import publish
from evalsi.engine._cache import CacheStats, ScoreCache
from evalsi.engine._keys import record_key
from evalsi.engine._runner import (
    ComponentJob,
    LookedUp,
    Pools,
    ScoringCancelled,
    finish_components,
    look_up_components,
    score_components,
)

__all__ = [
    "CacheStats",
    "ComponentJob",
    "LookedUp",
    "Pools",
    "ScoreCache",
    "ScoringCancelled",
    "finish_components",
    "look_up_components",
    "record_key",
    "score_components",
]

publish(__name__)
