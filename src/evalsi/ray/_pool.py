"""``RewardPool``: a RewardSpec scored by Ray actors across a cluster, with in-process results and errors."""

from __future__ import annotations

import hashlib
import logging
import socket
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evalsi.errors import EvalsiError, SpecError
from evalsi.evaluators import Score
from evalsi.ray._coordinator import Coordinator, content_keys
from evalsi.ray._direct import DirectRoute
from evalsi.ray._limiter import configure_limits
from evalsi.ray._options import NAMESPACE, PoolOptions
from evalsi.ray._ray import connect
from evalsi.ray._wire import join_keys, pack_records, to_parts, unpack_columns
from evalsi.records import Record, canonical_json
from evalsi.rewards import Reward, RewardResult, from_mapping, load
from evalsi.rewards._compose import ComponentRule

START_TIMEOUT = 600.0
"""Seconds to wait for a new pool's actors to start (a busy cluster schedules them slowly)."""
STOP_TIMEOUT = 120.0
"""Seconds :meth:`RewardPool.shutdown` waits for the pool's actors and their processes to be gone."""

log = logging.getLogger("evalsi.ray")

SpecSource = str | Path | Reward | Mapping[str, Any]


class RewardPoolError(EvalsiError, RuntimeError):
    """The pool could not score a rollout (its actors kept dying, or one raised); the batch failed whole.

    Args:
        index: The rollout's index in the batch.
        cause: Why the pool could not score it.

    """

    def __init__(self, index: int, cause: str) -> None:
        self.index = index
        self.cause = cause
        super().__init__(f"rollout {index}: the reward pool could not score it: {cause}")


class RewardPoolStartError(EvalsiError, RuntimeError):
    """A pool's actors could not be placed and started in time."""


class RewardPool:
    """A RewardSpec scored by ``num_workers`` Ray actors, each a warm scorer (sandbox fork server, math workers).

    ``pool.score(rollouts)`` answers what ``evalsi.rewards.load(spec).score(rollouts)`` would — the same
    totals, statuses and breakdowns in input order, and the same errors (a malformed rollout's ``DataError`` and
    a component's ``RewardBatchError`` under ``onError: raise`` name the rollout's index; the batch completes or
    fails whole) — with the batch spread over the cluster and one verdict cache shared by every actor.

    A batch is split evenly over the live actors. With a group-level component (``group-diversity``) each group
    of a call stays whole on one actor, so its rollouts are scored with the same group as in process.

    A whole batch (:meth:`score`, :meth:`score_async`) of a spec with no group-level component goes straight to
    the actors, one message out and one back per chunk; rollouts scored one at a time (:meth:`score_one`), and
    group-level specs, go through the pool's coordinator, which batches them across callers.

    Args:
        spec: A RewardSpec file, a mapping, or a loaded ``Reward``.
        num_workers: Scorer actors.
        resources: Ray resources each actor needs (custom resources place actors on chosen nodes).
        num_cpus: CPUs each actor reserves (its sandboxes and math workers run in its process tree).
        name: The pool's name; another process (a verl reward worker) attaches to it with
            :meth:`attach` or ``RewardPool(spec, name=...)``. A fresh name when not given.
        address: The Ray cluster to join when this process is not connected yet (``auto``, ``ray://...``).
        max_batch: Most rollouts in one chunk sent to an actor (a group of a group-level spec is never split, so
            a chunk holding one can be larger).
        window_ms: How long rollouts scored one at a time (``score_one``) wait to be batched together.
        max_queued: Most distinct rollouts queued or being scored by the coordinator, and on actors for each
            client's batches sent straight to them; further calls wait (back-pressure).
        max_retries: Further attempts of a chunk whose actor died or hung.
        chunk_timeout: Seconds after which a chunk's actor counts as hung: it is killed and restarted, and the
            chunk is scored again; None never.
        cache: ``"ray"`` (a cache shared by the actors, held by the pool's coordinator), None (each actor's own),
            or the evalsi server's database URL (``postgresql+psycopg://...``) to share its shared cache.
        cache_size: Entries of each in-memory cache.
        cache_project: With a server database: the project whose cache keys to use.
        imports: Modules each actor imports first (evaluator packs that register on import).
        runtime_env: Ray runtime environment of the actors (``env_vars``, ``py_modules``...).
        detached: Keep the pool alive after the creating process exits (until :meth:`shutdown`).
        limits: ``{upstream URL: Limit}``: judges, reward models and targets the actors call share one
            concurrency and rate limit per upstream across the cluster (see :func:`evalsi.ray.limit_upstreams`).
        start_timeout: Seconds to wait for the actors to be placed and started.

    Raises:
        RewardPoolStartError: The actors did not start in time (no room on the cluster for them).

    """

    def __init__(
        self,
        spec: SpecSource,
        *,
        num_workers: int = 2,
        resources: Mapping[str, float] | None = None,
        num_cpus: float = 1.0,
        name: str | None = None,
        address: str | None = None,
        max_batch: int = 256,
        window_ms: float = 5.0,
        max_queued: int = 65_536,
        max_retries: int = 3,
        chunk_timeout: float | None = 600.0,
        cache: str | None = "ray",
        cache_size: int = 1_048_576,
        cache_project: str | None = None,
        imports: Sequence[str] = (),
        runtime_env: Mapping[str, Any] | None = None,
        detached: bool = False,
        limits: Mapping[str, Any] | None = None,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.reward = _bind(spec)
        self.options = PoolOptions(
            name=name or f"pool-{uuid.uuid4().hex[:12]}",
            num_workers=num_workers,
            num_cpus=num_cpus,
            resources=dict(resources or {}),
            max_batch=max_batch,
            window_ms=window_ms,
            max_queued=max_queued,
            max_retries=max_retries,
            chunk_timeout=chunk_timeout,
            cache=cache,
            cache_size=cache_size,
            cache_project=cache_project,
            imports=tuple(imports),
            runtime_env=dict(runtime_env) if runtime_env else None,
            detached=detached,
            limits=dict(limits or {}),
        )
        self._ray = connect(address, NAMESPACE)
        configure_limits(self.options.limits)  # a changed limit is warned of here, where the operator changed it
        self._resource = self.reward.to_resource()
        self._spec_id = hashlib.sha256(canonical_json(self._resource)).hexdigest()
        self.coordinator = (
            self._ray.remote(Coordinator)
            .options(
                name=self.options.coordinator_name,
                namespace=NAMESPACE,
                get_if_exists=True,
                lifetime="detached" if detached else None,
                max_restarts=-1,
                max_task_retries=max_retries,  # a call in flight when the coordinator restarts is sent again
                max_concurrency=10_000,
                num_cpus=0,
                # on this process's node: a pool outlives a lost node only if its coordinator is not on it, and
                # this process (the trainer's driver) is lost with its own node anyway
                scheduling_strategy=_here(self._ray),
            )
            .remote(self.options)
        )
        self._setup()
        try:
            self._ray.get(self.coordinator.ready.remote(), timeout=start_timeout)
        except self._ray.exceptions.GetTimeoutError:
            raise RewardPoolStartError(
                f"the reward pool {self.options.name!r} did not start within {start_timeout:g} s: the cluster has "
                f"no room for {num_workers} actors of num_cpus={num_cpus:g} and resources={dict(resources or {})} "
                "(`ray status` shows what is free); the pool is still waiting for room: pool.shutdown() stops it"
            ) from None

    @classmethod
    def attach(cls, name: str, spec: SpecSource, *, address: str | None = None) -> RewardPool:
        """The running pool called ``name`` (started elsewhere), scoring ``spec``.

        Args:
            name: The pool's name on the cluster.
            spec: The RewardSpec to score: a file, a mapping or a loaded :class:`~evalsi.rewards.Reward`.
            address: The Ray cluster to connect to; None for the one ``ray.init`` finds.

        Raises:
            ValueError: No pool of that name runs on the cluster.

        """
        ray = connect(address, NAMESPACE)
        try:
            handle = ray.get_actor(PoolOptions(name=name).coordinator_name, namespace=NAMESPACE)
        except ValueError:
            raise ValueError(f"no evalsi reward pool named {name!r} runs on this Ray cluster") from None
        pool = cls.__new__(cls)
        pool.reward = _bind(spec)
        pool.options = PoolOptions(name=name)
        pool._ray = ray
        pool._resource = pool.reward.to_resource()
        pool._spec_id = hashlib.sha256(canonical_json(pool._resource)).hexdigest()
        pool.coordinator = handle
        pool._setup()
        return pool

    def with_spec(self, spec: SpecSource) -> RewardPool:
        """Another RewardSpec scored by this pool's actors (they keep every spec they are sent bound).

        Args:
            spec: The RewardSpec: a file, a mapping or a loaded :class:`~evalsi.rewards.Reward`.

        """
        pool = RewardPool.__new__(RewardPool)
        pool.reward = _bind(spec)
        pool.options = self.options
        pool._ray = self._ray
        pool._resource = pool.reward.to_resource()
        pool._spec_id = hashlib.sha256(canonical_json(pool._resource)).hexdigest()
        pool.coordinator = self.coordinator
        pool._setup(self._direct)
        return pool

    def _setup(self, direct: DirectRoute | None = None) -> None:
        """The route of this client's whole batches straight to the actors (shared by its other specs' clients)."""
        self._direct = direct or DirectRoute(self._ray, self.coordinator)
        self._record_level = all(component.evaluator.scope != "group" for component in self.reward.components)

    # The Scorer protocol of the trainer adapters.
    @property
    def name(self) -> str:
        """The RewardSpec's name."""
        return self.reward.name

    server: str | None = None
    """Scores on Ray actors, not through a Reward Service."""

    @property
    def source(self) -> str | None:
        """The spec file, if any."""
        return self.reward.source

    @property
    def component_names(self) -> list[str]:
        """Component names in spec order."""
        return self.reward.component_names

    @property
    def rules(self) -> list[ComponentRule]:
        """The composition rule of each component, in spec order."""
        return self.reward.rules

    def to_resource(self) -> dict[str, Any]:
        """The RewardSpec as a whole resource mapping."""
        return dict(self._resource)

    def records(self, rollouts: Iterable[Mapping[str, Any]]) -> list[Record]:
        """Normalise rollouts with the spec's ``referenceField`` (errors name the rollout's index).

        Args:
            rollouts: Rollout mappings (``completion``, ``prompt``, the reference field, any others).

        Raises:
            DataError: A rollout is malformed (names its index).

        """
        return self.reward.records(rollouts)

    def score(self, rollouts: Iterable[Mapping[str, Any]]) -> list[RewardResult]:
        """Score a batch across the pool; results in input order, the batch completes or fails whole.

        Args:
            rollouts: Rollout mappings (``completion``, ``prompt``, the reference field, any others).

        Raises:
            DataError: A rollout is malformed (names its index).
            RewardBatchError: A component errored under ``onError: raise`` (names the rollout).
            RewardPoolError: The pool could not score a rollout (names it).

        """
        return self.score_records(self.records(rollouts))

    def score_records(self, records: Sequence[Record], *, eager: bool = True) -> list[RewardResult]:
        """Score already normalised records (see :meth:`score`).

        ``eager=False`` lets them wait up to ``window_ms`` to share a chunk with other callers' rollouts (a
        trainer that scores one sample per call from many threads).

        Args:
            records: The records, from :meth:`records`.
            eager: Send them at once (True) or let them wait for others to batch with.

        """
        if not records:
            return []
        outcome = self._straight(records) if eager else None
        return self._compose(outcome or self._ray.get(self._submit(records, eager)))

    def component_scores(self, records: Sequence[Record]) -> list[list[Score]]:
        """Raw scores indexed ``[component][record]``, before composition, as ``Reward.component_scores`` gives them.

        What ``evalsi run --ray`` scores a run's generations with: the run composes and journals them itself.

        Args:
            records: The records, from :meth:`records`.

        Raises:
            RewardPoolError: The pool could not score a record (names it).

        """
        if not records:
            return [[] for _ in self.reward.components]
        return self._columns(self._straight(records) or self._ray.get(self._submit(records, True)))

    async def score_async(self, rollouts: Iterable[Mapping[str, Any]]) -> list[RewardResult]:
        """:meth:`score` for an event loop: awaits the pool without holding a thread.

        Args:
            rollouts: Rollout mappings, as for :meth:`score`.

        """
        return await self.score_records_async(self.records(rollouts))

    async def score_records_async(self, records: Sequence[Record], *, eager: bool = True) -> list[RewardResult]:
        """:meth:`score_records` for an event loop.

        Args:
            records: The records, from :meth:`records`.
            eager: Send them at once (True) or let them wait for others to batch with.

        """
        if not records:
            return []
        outcome = None
        if eager and self._record_level:
            keys = self._keys(records)
            outcome = await self._direct.score_async(self._spec_id, self._resource, pack_records(records), keys)
        return self._compose(outcome or await self._submit(records, eager))

    async def score_one(self, rollout: Mapping[str, Any]) -> RewardResult:
        """Score one rollout as it finishes, batched with those of every other caller of the pool.

        Rollouts wait up to ``window_ms`` (or until ``max_batch`` are queued) to go out together, so reward
        overlaps generation without a call per rollout.

        Args:
            rollout: One rollout mapping.

        Raises:
            DataError: The rollout is malformed.
            RewardBatchError: A component errored under ``onError: raise`` (index 0: this rollout).
            RewardPoolError: The pool could not score it.

        """
        return (await self.score_records_async(self.records([rollout]), eager=False))[0]

    def warm(self, rollouts: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Score ``rollouts`` on every actor, outside the caches, and wait: each actor's workers are then started.

        A new actor starts its evaluators' processes on first use (math-equiv's worker template imports its
        symbolic backends, a code component starts its sandboxes): seconds on a busy node, that would land in
        the first batches. Call it with a few representative rollouts before a latency-sensitive first step
        or a measurement. Nothing is cached: later calls score these rollouts again.

        Args:
            rollouts: A few representative rollout mappings.

        Returns:
            Where each actor runs (node, host, pid and child processes).

        Raises:
            DataError: A rollout is malformed (names its index).

        """
        records = self.records(rollouts)
        outcome = self._ray.get(self.coordinator.warm.remote(self._spec_id, self._resource, records))
        if outcome[0] == "spec_error":
            raise SpecError(outcome[1])
        return list(outcome[1])

    def stats(self) -> dict[str, Any]:
        """The pool's counters: calls, rollouts, chunks, retries, queue depth, in-flight, p50/p99 latency.

        Also each actor's node, process, cache hits and latency, and the shared cache's figures.
        """
        stats = dict(self._ray.get(self.coordinator.stats.remote()))
        room = self._direct.room
        if room is not None:  # this client's batches on actors, or waiting for room, now
            stats["waiting"] += room.waiting
            stats["admitted"] += room.held
            stats["max_admitted"] = max(stats["max_admitted"], room.peak)
        return stats

    def where(self) -> list[dict[str, Any]]:
        """Each scorer actor's node id and process id."""
        return list(self._ray.get(self.coordinator.where.remote()))

    def close(self) -> None:
        """Release this client (the pool keeps running for other clients; :meth:`shutdown` stops it)."""

    def shutdown(self, timeout: float = STOP_TIMEOUT) -> list[dict[str, Any]]:
        """Stop the pool and wait, up to ``timeout`` seconds, until its processes are gone.

        Each scorer actor first stops its math workers and sandboxes, then is killed for good; then the
        coordinator. The call returns once Ray reports every actor dead and the actors'
        processes on this host have exited, so a pool started next gets the CPUs this one held.

        Args:
            timeout: Seconds to wait for the actors and their processes to be gone.

        Returns:
            Each scorer actor's node, host and process id, and ``dead``: whether it was seen gone in time
            (a shortfall is also logged as a warning).

        """
        deadline = time.monotonic() + timeout
        actors: list[dict[str, Any]] = []
        try:
            actors = list(self._ray.get(self.coordinator.stop.remote(timeout * 0.8), timeout=timeout * 0.9))
        except Exception as exc:  # the coordinator is gone already, or did not answer: killed all the same
            log.debug("reward pool %r: stopping its actors: %s", self.options.name, exc)
        self._ray.kill(self.coordinator, no_restart=True)
        _wait_dead(self._ray, self.coordinator, deadline)
        host = socket.gethostname()
        local = [pid for a in actors if a.get("host") == host for pid in (a.get("pid"), *a.get("children", ()))]
        while any(_alive(pid) for pid in local if pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        for info in actors:
            here = info.get("host") == host
            info["dead"] = bool(info.get("dead")) and not (
                here and any(map(_alive, (info.get("pid"), *info.get("children", ()))))
            )
        stuck = [info for info in actors if not info["dead"]]
        if stuck:
            log.warning(
                "reward pool %r: %d actor(s) or their processes were still running %g s after shutdown: %s",
                self.options.name,
                len(stuck),
                timeout,
                stuck,
            )
        return actors

    def _keys(self, records: Sequence[Record]) -> list[tuple[bytes, ...]]:
        return content_keys([component.job for component in self.reward.components], records)

    def _straight(self, records: Sequence[Record]) -> tuple[Any, ...] | None:
        """The outcome of ``records`` sent straight to the actors; None for a group-level spec or no live actor."""
        if not self._record_level:
            return None
        return self._direct.score(self._spec_id, self._resource, pack_records(records), self._keys(records))

    def _submit(self, records: Sequence[Record], eager: bool) -> Any:
        """The coordinator's call scoring ``records`` (an object ref): tuples, pickled in parts (``_wire``).

        Their content keys are computed here and go with them: keying is a large share of the coordinator's work
        on a call, and every caller of the pool keys its own rollouts instead of the one coordinator keying all.
        """
        keys = join_keys(self._keys(records))
        parts = to_parts(pack_records(records))
        return self.coordinator.score.remote(self._spec_id, self._resource, eager, len(records), keys, *parts)

    def _compose(self, outcome: tuple[Any, ...]) -> list[RewardResult]:
        return self.reward.compose(self._columns(outcome))

    def _columns(self, outcome: tuple[Any, ...]) -> list[list[Score]]:
        kind = outcome[0]
        if kind == "spec_error":
            raise SpecError(outcome[1])
        if kind == "failed":
            raise RewardPoolError(outcome[1], outcome[2])
        return unpack_columns(outcome[1], len(self.reward.components))

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"RewardPool({self.reward.name!r}, pool={self.options.name!r})"


def _here(ray: Any) -> Any:
    """A scheduling strategy for this process's node only.

    Ray's soft node affinity was seen to place the coordinator on another node while this one was up, where losing
    that node lost the pool; pinned here, the coordinator is lost only with this process's own node.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)


def _wait_dead(ray: Any, handle: Any, deadline: float) -> None:
    """Wait until a killed actor is reported dead (a call to it fails), or ``deadline`` passes."""
    while time.monotonic() < deadline:
        try:
            ray.get(
                handle.__ray_ready__.options(max_task_retries=0).remote(), timeout=max(0.5, deadline - time.monotonic())
            )
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            return
        time.sleep(0.2)


def _alive(pid: int | None) -> bool:
    """Whether process ``pid`` of this host is running (an exited one not yet reaped counts as gone; Linux)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
    except OSError:
        return True


def _bind(spec: SpecSource) -> Reward:
    """The spec bound in this process.

    Raises:
        SpecError: The spec is invalid.

    """
    if isinstance(spec, Reward):
        return spec
    if isinstance(spec, Mapping):
        return from_mapping(spec)
    return load(spec)
