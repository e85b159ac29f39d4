"""evalsi on Ray: scoring across a cluster with warm scorer actors, and offline scoring on Ray Data.

Needs the ``ray`` extra (``pip install 'evalsi[ray]'``); nothing else in evalsi imports this package.

- :class:`RewardPool` — a RewardSpec scored by Ray actors, with in-process results and errors, one shared
  verdict cache, batching of rollouts scored one at a time, retries of chunks whose actor died or hung, and
  back-pressure.
- :func:`score_dataset` — a RewardSpec mapped over a JSONL or Parquet file of rollouts with Ray Data, resumable.
- :class:`RayShards` — an evaluation run cut into shards, each generated and scored by an actor on a CPU worker
  (``Runner(run, shards=RayShards(8))``, ``evalsi run --ray-shards``).
- :func:`limit_upstreams` — one concurrency and rate limit per upstream (judge, reward model, run target), shared by
  every actor of a cluster.
"""

from evalsi._util.public import publish
from evalsi.ray._data import DatasetBatchError, DatasetReport, score_dataset
from evalsi.ray._limiter import Limit, limit_upstreams
from evalsi.ray._pool import RewardPool, RewardPoolError, RewardPoolStartError
from evalsi.ray._ray import RayUnavailableError
from evalsi.ray._runs import RayShards

__all__ = [
    "DatasetBatchError",
    "DatasetReport",
    "Limit",
    "RayShards",
    "RayUnavailableError",
    "RewardPool",
    "RewardPoolError",
    "RewardPoolStartError",
    "limit_upstreams",
    "score_dataset",
]

publish(__name__)
