"""The scoring engine: content keys, the score cache, and running components over batches of records."""

from evalsi.engine._cache import CacheStats, ScoreCache
from evalsi.engine._keys import params_fingerprint, record_key
from evalsi.engine._runner import (
    ComponentJob,
    PendingComponent,
    Pools,
    ScoringCancelled,
    complete,
    look_up,
    score_component,
    score_components,
)

__all__ = [
    "CacheStats",
    "ComponentJob",
    "PendingComponent",
    "Pools",
    "ScoreCache",
    "ScoringCancelled",
    "complete",
    "look_up",
    "params_fingerprint",
    "record_key",
    "score_component",
    "score_components",
]
