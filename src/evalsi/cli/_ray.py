"""``--ray ADDRESS``: runs (``evalsi run``, checkpoints) on a Ray cluster: scored by a reward pool, or sharded.

A reward pool scores the run's generations; with ``--ray-shards N`` the run itself is cut into shards that
generate and score on the cluster's CPU workers.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from evalsi.runs import BoundRun, ComponentScorer, ShardRunner

RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="ADDRESS",
        help="Score the generations on a Ray cluster's CPU workers with a reward pool ('auto': the running "
        "cluster or RAY_ADDRESS; 'local': a new one in this process; or host:port); generation stays on "
        "the target, requested from this process unless --ray-shards is given.",
    ),
]
RayWorkers = Annotated[
    int, typer.Option("--ray-workers", min=1, help="Scorer actors with --ray (unused with --ray-shards).")
]
RayShardCount = Annotated[
    int | None,
    typer.Option(
        "--ray-shards",
        min=1,
        metavar="N",
        help="With --ray: cut the run's records into N shards, each generated and scored by an actor on one of "
        "the cluster's CPU workers (all shards together keep to the target's maxConcurrency); the results file "
        "is written and resumed here as without shards.",
    ),
]


def ray_shards(address: str, count: int) -> ShardRunner:
    """The shards of ``evalsi run --ray ADDRESS --ray-shards N``: one actor per shard on the cluster.

    Args:
        address: The Ray cluster (``auto``, ``local``, ``host:port``).
        count: How many shards.

    Raises:
        RayUnavailableError: Ray is not installed (an ``ImportError`` saying how to install it), said before the
            run starts.

    """
    from evalsi.ray import RayShards
    from evalsi.ray._ray import import_ray

    import_ray()
    return RayShards(count, address=address)


class PoolScorers:
    """One reward pool for every run of a command: started for the first run, then sent each run's RewardSpec.

    Args:
        address: The Ray cluster (``auto``, ``local``, ``host:port``).
        workers: The pool's scorer actors.

    Raises:
        RayUnavailableError: Ray is not installed (an ``ImportError`` saying how to install it), said before any
            run starts.

    """

    def __init__(self, address: str, workers: int) -> None:
        from evalsi.ray._ray import import_ray

        import_ray()
        self.address = address
        self.workers = workers
        self.pool: Any = None

    def __call__(self, run: BoundRun) -> ComponentScorer:
        """The pool, scoring ``run``'s RewardSpec (the pool starts on the first call)."""
        if self.pool is None:
            from evalsi.ray import RewardPool

            self.pool = RewardPool(run.reward, num_workers=self.workers, address=self.address)
            return self.pool  # type: ignore[no-any-return]
        return self.pool.with_spec(run.reward)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop the pool, if one started."""
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None
