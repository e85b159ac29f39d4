"""OpenRLHF adapter on Ray: ``reward_func`` for ``--reward.remote_url /path/to/evalsi/ray/openrlhf.py``.

(``python -c "import evalsi.ray.openrlhf as m; print(m.__file__)"`` prints the path.) OpenRLHF's rollout
workers are Ray actors that call the file's ``reward_func`` in a thread per sample; this one hands each sample
to one named :class:`~evalsi.ray.RewardPool` on the cluster, which batches the samples of every worker together
across its warm scorer actors, with no HTTP hop. Set ``EVALSI_REWARD_SPEC`` to the RewardSpec file,
``EVALSI_RAY_POOL`` to the pool's name (default ``openrlhf``) and ``EVALSI_RAY_WORKERS`` to the number of
scorer actors the first caller creates (default 2). The answer is that of ``evalsi/rewards/openrlhf.py``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from evalsi.ray._shared import shared_pool
from evalsi.rewards._latency import elapsed_ms
from evalsi.rewards.openrlhf import answer, records, required_spec

__all__ = ["reward_func"]

DEFAULT_POOL = "openrlhf"


def reward_func(
    queries: Sequence[str],
    prompts: Sequence[str] | None = None,
    labels: Sequence[Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """OpenRLHF's file-form reward function, scored on the pool.

    Args:
        queries: Decoded prompt + response, one per sample.
        prompts: The prompts, aligned with ``queries``.
        labels: The references, aligned; None when the dataset has none.
        **kwargs: Ignored (room for what newer OpenRLHF versions pass). The pool is named by ``$EVALSI_RAY_POOL``
            (default ``openrlhf``) and, when this call creates it, has ``$EVALSI_RAY_WORKERS`` actors (default 2).

    Returns:
        ``{"rewards", "scores", "extra_logs"}`` as ``evalsi/rewards/openrlhf.py`` returns them.

    Raises:
        SpecError: ``EVALSI_REWARD_SPEC`` is not set, the spec is invalid, or it can leave a rollout without a total.
        RewardBatchError: A component errored under ``onError: raise``.

    """
    options = {"num_workers": int(os.environ.get("EVALSI_RAY_WORKERS") or 2)}
    pool = shared_pool(required_spec(), os.environ.get("EVALSI_RAY_POOL") or DEFAULT_POOL, "OpenRLHF", options)
    started = time.perf_counter()
    results = pool.score_records(records(queries, prompts, labels), eager=False)
    return answer(pool, results, elapsed_ms(started))
