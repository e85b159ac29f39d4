"""verl adapter on Ray: ``custom_reward_function`` scoring through a :class:`~evalsi.ray.RewardPool`.

verl's reward loop runs reward workers as Ray actors and awaits an ``async`` reward function per rollout as it
finishes. This file's :func:`compute_score` hands each rollout to one named pool on the cluster (created by the
first worker that asks, attached by the others), which batches the rollouts of every worker together and
spreads them over its warm scorer actors: no HTTP hop, one verdict cache, reward overlapping generation::

    reward:
      custom_reward_function:
        path: /path/to/site-packages/evalsi/ray/verl.py   # python -c "import evalsi.ray.verl as m; print(m.__file__)"
        name: compute_score                                # compute_score_batch with the batch reward manager
        reward_kwargs:
          spec: /path/to/reward.yaml
          pool: grpo-rewards        # the pool's name on the cluster (default: verl)
          num_workers: 8            # scorer actors, when this run creates the pool
          num_cpus: 1
          resources: {}             # e.g. {reward_node: 1} to keep scorers off the GPU nodes

It returns what ``evalsi/rewards/verl.py`` returns (``{"score": total, <component>: value,
<component>_skipped: ...}``), and refuses a spec with ``onError: none`` the same way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from evalsi.ray._pool import RewardPool
from evalsi.ray._shared import shared_pool
from evalsi.rewards._latency import elapsed_ms
from evalsi.rewards.verl import answer, rollout, samples, spec_of

__all__ = ["compute_score", "compute_score_batch"]

DEFAULT_POOL = "verl"


async def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    **reward_kwargs: Any,
) -> dict[str, float]:
    """The per-rollout reward function of verl (the reward loop awaits it as each rollout finishes).

    Args:
        data_source: The sample's data source.
        solution_str: The decoded response.
        ground_truth: The reference.
        extra_info: More fields of the sample (test cases, ids).
        **reward_kwargs: ``spec`` (else ``$EVALSI_REWARD_SPEC``), ``pool`` and the pool's settings
            (``num_workers``, ``num_cpus``, ``resources``, ``max_batch``, ``window_ms``...); others verl passes
            are ignored.

    Returns:
        ``{"score": total, <component>: value, ...}``.

    Raises:
        SpecError: No spec, an invalid one, or one that can leave a rollout without a total.
        RewardBatchError: A component errored under ``onError: raise``.

    """
    # creating or attaching waits on the cluster: off the event loop, so other rollouts keep flowing
    pool = await asyncio.to_thread(_pool, reward_kwargs)
    started = time.perf_counter()
    result = await pool.score_one(rollout(data_source, solution_str, ground_truth, extra_info))
    return answer(pool, [result], elapsed_ms(started))[0]


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
    **reward_kwargs: Any,
) -> list[dict[str, float]]:
    """The batch reward function of verl (``reward_manager.name=batch``): the batch spread over the pool at once.

    Args:
        data_sources: Each sample's data source.
        solution_strs: Each decoded response.
        ground_truths: Each reference.
        extra_infos: Each sample's other fields; None when verl passes none.
        **reward_kwargs: As for :func:`compute_score`.

    Returns:
        One dict per sample, as :func:`compute_score` returns.

    Raises:
        SpecError: No spec, an invalid one, or one that can leave a rollout without a total.
        RewardBatchError: A component errored under ``onError: raise``.

    """
    pool = _pool(reward_kwargs)
    batch = [rollout(*sample) for sample in samples(data_sources, solution_strs, ground_truths, extra_infos)]
    started = time.perf_counter()
    results = pool.score(batch)
    return answer(pool, results, elapsed_ms(started))


def _pool(reward_kwargs: Mapping[str, Any]) -> RewardPool:
    """The process's client of the pool ``reward_kwargs`` name (created on the cluster by the first caller)."""
    return shared_pool(spec_of(reward_kwargs), str(reward_kwargs.get("pool") or DEFAULT_POOL), "verl", reward_kwargs)
