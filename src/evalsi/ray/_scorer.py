"""The scorer actor: a process that holds bound RewardSpecs, their warm sandbox and math workers, and a cache.

An actor scores chunks of records with the engine (``Reward.component_scores``: cache look-up, de-duplication,
components on their pools) and hands back the raw component scores; composition happens in the caller, so
totals, statuses and errors are exactly those of in-process scoring. Its sandboxes run on the actor's node,
at each component's rung.

A chunk comes either from the pool's coordinator (with the shared tier's verdicts for its keys) or straight from
a caller (:meth:`ScorerActor.score_direct`); in the second case the actor publishes the verdicts it computed to the
coordinator just after its reply, and the coordinator forwards them to the other actors (:meth:`replicate`).
Quick calls (``replicate``, ``info``) run in a concurrency group of their own, so they are answered while a chunk
is being scored.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import queue
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from evalsi.engine import Pools, finish_components
from evalsi.ray._cache import ReplicaCache, SeededCache, cache_counts, open_cache
from evalsi.ray._metrics import ActorMetrics, quantiles
from evalsi.ray._options import PoolOptions
from evalsi.ray._wire import PackedRow, PackedScore, from_parts, pack_rows, split_keys, unpack_records
from evalsi.records import Record
from evalsi.rewards import Reward, from_mapping

MAX_SPECS = 32
"""Bound RewardSpecs an actor keeps (least recently used first out)."""
CONTROL = "control"
"""The concurrency group of an actor's quick calls, answered while a chunk is being scored."""
PUBLISH_DELAY = 0.002
"""Seconds new verdicts wait before they go to the coordinator, so the reply to the chunk goes out first."""


class ScorerActor:
    """One scorer process of a pool (run as a Ray actor; one chunk at a time)."""

    def __init__(self, options: PoolOptions, index: int, coordinator: Any = None) -> None:
        for module in options.imports:  # evaluator packs that register on import
            importlib.import_module(module)
        import ray

        self.options = options
        self.index = index
        self.cache = open_cache(options)
        if options.limits:
            from evalsi.ray._limiter import limit_upstreams

            limit_upstreams(options.limits)
        self._rewards: OrderedDict[str, Reward] = OrderedDict()
        self._threads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="evalsi-ray-components")
        self._lock = threading.Lock()
        self.metrics = ActorMetrics(options.name, index)
        self._node = ray.get_runtime_context().get_node_id()
        self.chunks = 0
        self.rollouts = 0
        self.seconds = 0.0
        """Time spent scoring chunks here (what the pool's hops add to is the rest of a call's time)."""
        self._coordinator = coordinator
        self._published: queue.SimpleQueue[list[tuple[bytes, PackedScore]]] = queue.SimpleQueue()
        if coordinator is not None and isinstance(self.cache, ReplicaCache):
            threading.Thread(target=self._publish, name="evalsi-ray-publish", daemon=True).start()

    def where(self) -> dict[str, Any]:
        """The node, host and process this actor runs in, and its child processes (math workers, sandboxes)."""
        return {
            "index": self.index,
            "node_id": self._node,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "children": child_pids(),
        }

    def warm(self, spec_id: str, resource: dict[str, Any], records: Sequence[Record]) -> dict[str, Any]:
        """Score ``records`` outside every cache, so the spec is bound and its workers have started here.

        Math-equiv's worker template imports its symbolic backends and a code component starts its sandboxes on
        first use: seconds, that would otherwise land in whichever batch first reaches this actor.
        """
        reward = self._reward(spec_id, resource)
        reward.component_scores(records, cache=None, pools=Pools(components=self._threads))
        return self.where()

    def close(self, timeout: float = 30.0) -> dict[str, Any]:
        """Stop what this actor started: every bound spec's evaluator processes (math workers, sandboxes), threads.

        Called by the pool's shutdown before the actor is killed, so its process tree is gone with it (a killed
        actor's grandchildren would otherwise linger, busy, on the node). Waits up to ``timeout`` seconds for the
        child processes to exit.

        Returns:
            :meth:`where`, with ``children`` the child processes still alive at the end.

        """
        with self._lock:
            bound = list(self._rewards.values())
            self._rewards.clear()
        evaluators = {id(c.evaluator): c.evaluator for reward in bound for c in reward.components}
        for evaluator in evaluators.values():
            with contextlib.suppress(Exception):  # one evaluator failing to close must not keep the others up
                evaluator.close()
        for reward in bound:
            reward.close()
        self._threads.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout
        while child_pids() and time.monotonic() < deadline:  # an exited child not yet reaped counts as gone
            time.sleep(0.05)
        return self.where()

    def score(
        self,
        spec_id: str,
        resource: dict[str, Any],
        found: dict[bytes, PackedScore] | None,
        asked: int,
        keys: list[bytes] | None,
        *parts: bytes,
    ) -> tuple[list[PackedRow], dict[str, Any]]:
        """Raw component scores of a chunk the coordinator sent, by record, and this actor's counters.

        Records come as tuples pickled in parts (:func:`evalsi.ray._wire.to_parts`: each part travels inside the
        call, not through the object store) and scores go as tuples (:mod:`evalsi.ray._wire`). ``found`` are
        the verdicts the pool's shared tier (in the coordinator) holds for the chunk, of the ``asked`` keys it
        looked up (the coordinator keeps the chunk's new verdicts from the scores it gets back). ``keys`` are
        the records' content keys, one byte string per component (:func:`evalsi.ray._wire.join_keys`), so the
        engine here does not key them again.

        Raises:
            SpecError: The spec does not bind here (an evaluator this process does not have).

        """
        rows, info = self._score(spec_id, resource, found or {}, asked, keys, parts)
        if isinstance(self.cache, ReplicaCache):
            self.cache.drain()  # the coordinator keeps this chunk's verdicts from the rows it gets back
        return rows, info

    def score_direct(
        self, spec_id: str, resource: dict[str, Any], keys: list[bytes] | None, *parts: bytes
    ) -> tuple[list[PackedRow], dict[str, Any]]:
        """Raw component scores of a chunk a caller sent straight here, by record, and this actor's counters.

        The chunk is looked up in this actor's cache alone (it holds the verdicts the other actors published);
        the verdicts computed here go to the coordinator just after the reply, for the shared tier and the other
        actors.

        Raises:
            SpecError: The spec does not bind here (an evaluator this process does not have).

        """
        rows, info = self._score(spec_id, resource, None, 0, keys, parts)
        if isinstance(self.cache, ReplicaCache) and self._coordinator is not None:
            new = self.cache.drain()
            if new:
                self._published.put(new)
        return rows, info

    def replicate(self, entries: list[tuple[bytes, PackedScore]]) -> int:
        """Store verdicts the other actors computed (the coordinator forwards them); the entries taken."""
        if isinstance(self.cache, ReplicaCache):
            self.cache.replicate(entries)
            return len(entries)
        return 0

    def info(self) -> dict[str, Any]:
        """Where this actor runs, its counters and the p50/p99 of its recent chunks' time here.

        The counters: chunks, rollouts, seconds scoring, cache hits and misses by tier, verdicts replicated.
        """
        return {**self.where(), **self._counters(), **quantiles(self.metrics.recent)}

    def _score(
        self,
        spec_id: str,
        resource: dict[str, Any],
        found: dict[bytes, PackedScore] | None,
        asked: int,
        keys: list[bytes] | None,
        parts: tuple[bytes, ...],
    ) -> tuple[list[PackedRow], dict[str, Any]]:
        started = time.perf_counter()
        records = unpack_records(from_parts(parts))
        self.metrics.inflight(len(records))
        try:
            reward = self._reward(spec_id, resource)
            if found is not None and isinstance(self.cache, SeededCache):
                self.cache.seed(found, asked)
            pools = Pools(components=self._threads, observe=self.metrics.observe_component)
            looked = reward.look_up(records, cache=self.cache, timed=True, keys=split_keys(keys, len(records)))
            columns = finish_components(looked, self.cache, pools)
        finally:
            self.metrics.inflight(-len(records))
        self.chunks += 1
        self.rollouts += len(records)
        elapsed = time.perf_counter() - started
        self.seconds += elapsed
        info = self._counters()
        self.metrics.observe_chunk(len(records), elapsed, info)
        return pack_rows(columns, len(records)), info

    def _counters(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "node_id": self._node,
            "pid": os.getpid(),
            "chunks": self.chunks,
            "rollouts": self.rollouts,
            "seconds": self.seconds,
            **cache_counts(self.cache),
        }

    def _publish(self) -> None:
        """Send the verdicts computed here to the coordinator, a moment after each reply (a thread of its own)."""
        while True:
            batch = self._published.get()
            time.sleep(PUBLISH_DELAY)
            while True:
                try:
                    batch.extend(self._published.get_nowait())
                except queue.Empty:
                    break
            with contextlib.suppress(Exception):  # the coordinator restarting: these verdicts stay local
                self._coordinator.publish.remote(self.index, batch)

    def _reward(self, spec_id: str, resource: dict[str, Any]) -> Reward:
        with self._lock:
            bound = self._rewards.get(spec_id)
            if bound is not None:
                self._rewards.move_to_end(spec_id)
                return bound
            reward = from_mapping(resource)
            bound = self._rewards[spec_id] = reward
            while len(self._rewards) > MAX_SPECS:
                _, old = self._rewards.popitem(last=False)
                old.close()
            return bound


def child_pids() -> list[int]:
    """The live child processes of the calling process (Linux ``/proc``; none elsewhere)."""
    out: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/children") as handle:
                out.extend(int(pid) for pid in handle.read().split())
        except OSError:
            continue
    return sorted(pid for pid in set(out) if not _zombie(pid))


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
