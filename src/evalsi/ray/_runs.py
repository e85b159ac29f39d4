"""A run sharded across a Ray cluster: each shard generates and scores its records in an actor on a CPU worker.

``Runner(run, shards=RayShards(8, address="auto"))`` (``evalsi run --ray ADDRESS --ray-shards 8``) keeps the
results file, journal and resuming in the driver, and starts one :class:`ShardWorker` actor per shard, spread
over the cluster's nodes. Each actor binds the run's spec again, builds its target and scores with the run's
reward in its own process (:func:`evalsi.runs.run_shard`), streaming a report per scored batch back to the driver,
which journals it at once.

Every actor requests completions through the cluster-wide limiter of each of the target's endpoints
(:func:`evalsi.ray.limit_upstreams`), so the shards together never hold more than the target's
``maxConcurrency`` requests open to its inference server (split between the replicas of ``baseUrls``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from evalsi.ray._limiter import Limit, configure_limits, limit_upstreams
from evalsi.ray._options import NAMESPACE
from evalsi.ray._ray import connect
from evalsi.runs import BoundRun, Shard, ShardReport, run_from_mapping, run_shard
from evalsi.runs._sharding import lost_shard_report
from evalsi.runs._targets import ModelFn
from evalsi.specs import API_VERSION, TargetSpec


class RayShards:
    """Runs a run's shards on a Ray cluster, one actor each (a :class:`evalsi.runs.ShardRunner`).

    Args:
        count: How many shards the records are cut into (at most one per record).
        address: The Ray cluster to join when this process is not connected yet (``auto``, ``local``,
            ``host:port``, ``ray://...``); None for the one ``ray.init`` finds.
        num_cpus: CPUs each shard's actor holds (generation waits on the endpoint; scoring uses the CPU).
        resources: Custom Ray resources each actor holds (to place the shards on chosen nodes).
        runtime_env: The actors' Ray runtime environment.
        imports: Modules each actor imports before binding the spec (evaluator packs that register on import).
        limit_target: Limit the shards' requests to each endpoint of the target through its cluster-wide
            limiter, to the target's ``maxConcurrency`` in all (a limiter kept at another limit by an earlier run
            takes this one, with a warning; a lost shard's leases come back within ``Limit.holder_timeout``).

    Raises:
        ValueError: ``count`` is below 1.

    """

    def __init__(
        self,
        count: int,
        *,
        address: str | None = None,
        num_cpus: float = 1.0,
        resources: Mapping[str, float] | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        imports: Sequence[str] = (),
        limit_target: bool = True,
    ) -> None:
        if count < 1:
            raise ValueError(f"RayShards: count must be at least 1, got {count}")
        self._count = count
        self.address = address
        self.num_cpus = num_cpus
        self.resources = dict(resources or {})
        self.runtime_env = dict(runtime_env) if runtime_env is not None else None
        self.imports = tuple(imports)
        self.limit_target = limit_target

    @property
    def count(self) -> int:
        """How many shards a run's records are cut into."""
        return self._count

    async def run_shards(
        self, run: BoundRun, shards: Sequence[Shard], generated_by: str, fn: ModelFn | None
    ) -> AsyncGenerator[ShardReport, None]:
        """Start one actor per shard and stream their reports; the actors are killed when this closes.

        Args:
            run: The bound run.
            shards: The shards.
            generated_by: The run's generation fingerprint.
            fn: An in-process model standing in for the spec's target, sent to each actor.

        Yields:
            Every shard's reports as they arrive; a lost actor's unreported records as failed.

        """
        ray = connect(self.address, NAMESPACE)
        limits = configure_limits(target_limits(run.body.target) if self.limit_target else {})
        base_dir = None if run.base_dir is None else str(run.base_dir)
        options: dict[str, Any] = {
            "num_cpus": self.num_cpus,
            "resources": self.resources,
            "scheduling_strategy": "SPREAD",
            "max_restarts": 0,
        }
        if self.runtime_env is not None:
            options["runtime_env"] = self.runtime_env
        worker = ray.remote(ShardWorker).options(**options)
        document = run_document(run)
        actors = [worker.remote(document, run.spec.source, base_dir, limits, fn, self.imports) for _ in shards]
        runs = [actor.run.remote(shard, generated_by) for actor, shard in zip(actors, shards, strict=True)]
        try:
            streams = [_stream(ray, actor, refs) for actor, refs in zip(actors, runs, strict=True)]
            async with contextlib.aclosing(merge_reports(shards, streams)) as reports:
                async for report in reports:
                    yield report
        finally:
            await _stop(ray, actors, runs)


class ShardWorker:
    """A shard's actor: the run bound again in this process, its target's requests under the cluster's limits.

    Args:
        document: The RunSpec resource (:func:`run_document`).
        source: What names the spec in errors (its file).
        base_dir: What the spec's relative paths are relative to.
        limits: ``{endpoint: Limit}`` for :func:`evalsi.ray.limit_upstreams` (none when empty).
        fn: An in-process model standing in for the spec's target, if any.
        imports: Modules to import before binding the spec (evaluator packs that register on import).

    """

    def __init__(
        self,
        document: Mapping[str, Any],
        source: str | None,
        base_dir: str | None,
        limits: Mapping[str, Limit],
        fn: ModelFn | None,
        imports: Sequence[str] = (),
    ) -> None:
        for module in imports:
            importlib.import_module(module)
        self.bound = run_from_mapping(document, source, None if base_dir is None else Path(base_dir))
        self.fn = fn
        # this process is the actor's own: the gate goes with it when the actor is killed
        self.gate = limit_upstreams(limits) if limits else None
        self.idle = asyncio.Event()
        self.idle.set()

    async def run(self, shard: Shard, generated_by: str) -> AsyncGenerator[ShardReport, None]:
        """Generate and score the shard, yielding a report per scored batch (a Ray streaming generator).

        Args:
            shard: The shard's records.
            generated_by: The run's generation fingerprint.

        Yields:
            The shard's reports.

        """
        self.idle.clear()
        try:
            async with contextlib.aclosing(run_shard(self.bound, shard, generated_by, self.fn)) as reports:
                async for report in reports:
                    yield report
        finally:
            self.idle.set()

    async def close(self) -> None:
        """Return once the shard's run has stopped and the limiters have every lease it held back."""
        await self.idle.wait()
        if self.gate is not None:
            # Calls to an actor from one process arrive in order: once these are answered, the leases the stopped
            # requests gave back (calls without an answer) have arrived too.
            await asyncio.gather(*(handle.stats.remote() for handle in self.gate.handles.values()))


def run_document(run: BoundRun) -> dict[str, Any]:
    """The run as a RunSpec resource that binds again to the same run in another process.

    Args:
        run: The bound run.

    Returns:
        The resource as a mapping (``apiVersion``, ``kind``, ``metadata``, ``spec``).

    """
    return {
        "apiVersion": API_VERSION,
        "kind": "RunSpec",
        "metadata": {"name": run.spec.name},
        "spec": run.body.model_dump(mode="json", by_alias=True, exclude_unset=True),
    }


def target_limits(target: TargetSpec) -> dict[str, Limit]:
    """The limit of each of the target's endpoints: ``maxConcurrency`` split between the replicas.

    Each replica gets an equal share (the first ones one more when it does not divide), at least one request.
    A callable target has no endpoint to limit.

    Args:
        target: The run's target.

    Returns:
        ``{endpoint base URL: Limit}``.

    """
    endpoints = target.endpoints()
    if not endpoints:
        return {}
    share, extra = divmod(target.max_concurrency, len(endpoints))
    return {url: Limit(max_concurrency=max(1, share + (i < extra))) for i, url in enumerate(endpoints)}


async def merge_reports(
    shards: Sequence[Shard], streams: Sequence[AsyncIterator[ShardReport]]
) -> AsyncGenerator[ShardReport, None]:
    """The shards' report streams merged as their reports arrive; a stream that fails fails its unreported records.

    Args:
        shards: The shards, one per stream.
        streams: Each shard's reports.

    Yields:
        Every report of every stream, and for a stream that raised, one report failing the records it had not
        reported, saying why.

    """
    queue: asyncio.Queue[ShardReport | None] = asyncio.Queue()

    async def pump(shard: Shard, stream: AsyncIterator[ShardReport]) -> None:
        reported: set[str] = set()
        try:
            async for report in stream:
                reported.update(result.key for result in report.results)
                reported.update(report.failed)
                queue.put_nowait(report)
        except Exception as exc:  # the actor, its node or its pipeline failed: its other records stay to do
            queue.put_nowait(lost_shard_report(shard, reported, _reason(exc)))
        finally:
            queue.put_nowait(None)

    tasks = [asyncio.create_task(pump(shard, stream)) for shard, stream in zip(shards, streams, strict=True)]
    try:
        running = len(tasks)
        while running:
            report = await queue.get()
            if report is None:
                running -= 1
            else:
                yield report
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


STOP_SECONDS = 30.0
"""How long stopped shards may take to cancel their requests and give their leases back before they are killed."""


async def _stop(ray: Any, actors: Sequence[Any], runs: Sequence[Any]) -> None:
    """Stop the shards: cancel their runs, let them give their leases back (bounded), then kill the actors.

    Killed at once, a shard would keep its leases of the target's limiter until its heartbeats are missed
    (``holder_timeout``), and a run resumed at once would wait for them.
    """
    for refs in runs:
        with contextlib.suppress(Exception):  # a finished or lost shard's run
            ray.cancel(refs)
    closing = [actor.close.remote() for actor in actors]
    with contextlib.suppress(Exception):
        await asyncio.wait_for(asyncio.gather(*closing, return_exceptions=True), STOP_SECONDS)
    for actor in actors:
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)


async def _stream(ray: Any, actor: Any, refs: Any) -> AsyncGenerator[ShardReport, None]:
    """The reports of a shard actor's streaming generator, each awaited as it is produced.

    A shard done frees its actor's CPU at once, for a shard still waiting for one (more shards than free CPUs).
    """
    async for ref in refs:
        report: ShardReport = await ref
        yield report
    await actor.close.remote()
    ray.kill(actor, no_restart=True)


def _reason(exc: BaseException) -> str:
    """An error in one line: its type and its message's first line."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
