"""Score components over a batch of records: cache look-up, de-duplication, then the evaluator's batch call."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

from evalsi.engine._cache import ScoreCache
from evalsi.engine._keys import params_fingerprint, record_key
from evalsi.errors import EvalsiError
from evalsi.evaluators import Evaluator, Params, Score, ScoreContext
from evalsi.records import Record


@dataclass(frozen=True)
class ComponentJob:
    """One component to run over the batch: which evaluator, with which validated params.

    The cache-key prefix and the fields read are worked out once, when the job is made: a small batch (one
    OpenRLHF sample) should not pay for serialising the params on every call.
    """

    name: str
    evaluator: Evaluator[Any]
    params: Params
    key_prefix: bytes = field(init=False)
    """Evaluator name + canonical params, the shared part of this component's cache keys."""
    fields: tuple[str, ...] = field(init=False)
    """The record fields this component's score depends on."""

    def __post_init__(self) -> None:
        version = self.evaluator.cache_version
        name = f"{self.evaluator.name}@{version}" if version else self.evaluator.name
        object.__setattr__(self, "key_prefix", params_fingerprint(name, self.params))
        object.__setattr__(self, "fields", tuple(self.evaluator.cache_fields(self.params)))


@dataclass
class PendingComponent:
    """One component after its cache look-up: the scores found, and the records still to score."""

    job: ComponentJob
    records: Sequence[Record]
    scores: list[Score | None]
    todo: dict[bytes, list[int]]
    """Content key -> positions of the records with that key that missed the cache."""
    seconds: list[float] = field(default_factory=list)
    """Once completed: the seconds this component spent on each record (0.0 for a cached score)."""

    @property
    def done(self) -> bool:
        """Every record has a score already."""
        return not self.todo


def look_up(
    job: ComponentJob, records: Sequence[Record], cache: ScoreCache | None, keys: Sequence[bytes] | None = None
) -> PendingComponent:
    """Key every record and take what the cache holds; identical records share one key (scored once).

    A group-level component's score depends on the other rollouts of its group: every record is scored, in the
    batch it came in, and nothing is cached. ``keys`` are the records' content keys under this component when
    the caller has computed them already (:func:`record_key` with the job's prefix and fields).
    """
    if job.evaluator.scope == "group":
        return PendingComponent(job, records, [None] * len(records), {b"%d" % i: [i] for i in range(len(records))})
    if keys is None:
        prefix, fields = job.key_prefix, job.fields
        keyed = [record_key(prefix, r, fields) for r in records]
    else:
        keyed = list(keys)
    cached: list[Score | None] = cache.get_many(keyed) if cache is not None else [None] * len(records)
    todo: dict[bytes, list[int]] = {}
    for position, (key, hit) in enumerate(zip(keyed, cached, strict=True)):
        if hit is None:
            todo.setdefault(key, []).append(position)
    return PendingComponent(job, records, cached, todo)


def complete(
    pending: PendingComponent, cache: ScoreCache | None, cancelled: threading.Event | None = None
) -> list[Score]:
    """Score the records the cache missed in one ``score_batch`` call, store the results, return every score.

    ``cancelled`` reaches the evaluator in its :class:`~evalsi.evaluators.ScoreContext`.
    """
    out = pending.scores
    seconds = pending.seconds = [0.0] * len(out)
    if pending.todo:
        unique = [pending.records[positions[0]] for positions in pending.todo.values()]
        fresh, took = _call_evaluator(pending.job, unique, cancelled)
        new_entries: list[tuple[bytes, Score]] = []
        for (key, positions), score, spent in zip(pending.todo.items(), fresh, took, strict=True):
            for position in positions:
                out[position] = score
                seconds[position] = spent
            new_entries.append((key, score))
        if cache is not None and pending.job.evaluator.scope != "group":
            cache.put_many(new_entries)
    return [s if s is not None else Score.error("internal: missing score") for s in out]


def score_component(job: ComponentJob, records: Sequence[Record], cache: ScoreCache | None) -> list[Score]:
    """Scores of one component for every record, in order.

    Cached scores are reused; identical records in the batch (GRPO repeats completions) are scored once; the
    evaluator sees only the records that still need a score, in one ``score_batch`` call. An exception or a
    wrong-length answer from the evaluator becomes an ``error`` score for the records it should have scored.
    """
    return complete(look_up(job, records, cache), cache)


def _call_evaluator(
    job: ComponentJob, records: list[Record], cancelled: threading.Event | None
) -> tuple[list[Score], list[float]]:
    """The evaluator's scores of ``records`` and the seconds each took.

    An evaluator that scores one record at a time (it keeps the base ``score_batch``) is timed record by record;
    one that scores the batch at once (served models, sandboxes, groups) gives each record an equal share of the
    call's time.
    """
    evaluator, ctx = job.evaluator, ScoreContext(component=job.name, cancelled=cancelled)
    if getattr(evaluator.score_batch, "__func__", None) is Evaluator.score_batch:  # the base, however reached
        scores, seconds = _score_each(evaluator, records, job.params, ctx)
    else:
        started = time.perf_counter()
        try:
            scores = evaluator.score_batch(records, job.params, ctx)
        except Exception as exc:  # the evaluator failed as a whole: every record it held errors, with the cause
            scores = [Score.error(f"{evaluator.name} failed: {type(exc).__name__}: {exc}")] * len(records)
        share = (time.perf_counter() - started) / max(len(records), 1)
        seconds = [share] * len(records)
    if len(scores) != len(records):
        reason = f"{evaluator.name} returned {len(scores)} scores for {len(records)} records"
        return [Score.error(reason)] * len(records), seconds
    checked = [
        s if isinstance(s, Score) else Score.error(f"{evaluator.name} returned {s!r}, not a Score") for s in scores
    ]
    return checked, seconds


def _score_each(
    evaluator: Evaluator[Any], records: list[Record], params: Params, ctx: ScoreContext
) -> tuple[list[Score], list[float]]:
    """The base ``score_batch`` (one record's exception is that record's error), timing each record."""
    scores: list[Score] = []
    seconds: list[float] = []
    clock = time.perf_counter
    for record in records:
        started = clock()
        try:
            scores.append(evaluator.score(record, params, ctx))
        except Exception as exc:  # a failed sample is data
            scores.append(Score.error(f"{type(exc).__name__}: {exc}"))
        seconds.append(clock() - started)
    return scores, seconds


class ScoringCancelled(EvalsiError):
    """The caller went away before a component's evaluator was called; its work was dropped, not done."""


@dataclass(frozen=True)
class Pools:
    """Where a batch's components run: the scheduling strategy of :func:`score_components`.

    Components that run code go to ``sandbox`` when it is set (so code never runs on the calling thread or on a
    cpu pool); of the other components that still need evaluator calls, the first runs on the calling thread and
    the rest go to ``components`` (on the calling thread, one after another, when it is None). Callers wait on
    components and components wait on nothing, so no pool ever waits on itself. ``observe`` is called with each
    component's job, scores and seconds once it is scored (the server's metrics).
    """

    components: Executor | None = None
    sandbox: Executor | None = None
    observe: Callable[[ComponentJob, list[Score], float], None] | None = None


@dataclass
class LookedUp:
    """A batch after every component's cache look-up (the first phase of :func:`score_components`).

    The look-ups are cheap and never wait on an evaluator, so a caller may run them where it cannot afford to
    wait (the server's event loop) and hand the rest to :func:`finish_components` on a thread only when needed.
    """

    jobs: Sequence[ComponentJob]
    pending: list[PendingComponent]
    seconds: list[float]
    """Seconds each component's look-up took (zeros when not timed)."""

    @property
    def done(self) -> bool:
        """Every component of every record was found in the cache: finishing calls no evaluator."""
        return all(p.done for p in self.pending)


def look_up_components(
    jobs: Sequence[ComponentJob],
    records: Sequence[Record],
    cache: ScoreCache | None,
    *,
    timed: bool = False,
    keys: Sequence[Sequence[bytes]] | None = None,
) -> LookedUp:
    """Every component's cache look-up over ``records``, timed per component when ``timed``.

    Args:
        jobs: The components, each bound to its evaluator and params.
        records: The records to score.
        cache: Where scores are looked up; None finds none.
        timed: Whether to time each component's look-up.
        keys: The records' content keys by component, then record, when already computed (else computed here).

    """
    by_job = keys if keys is not None else [None] * len(jobs)
    if not timed:
        return LookedUp(
            jobs, [look_up(job, records, cache, k) for job, k in zip(jobs, by_job, strict=True)], [0.0] * len(jobs)
        )
    pending, seconds = [], []
    for job, job_keys in zip(jobs, by_job, strict=True):
        started = time.perf_counter()
        pending.append(look_up(job, records, cache, job_keys))
        seconds.append(time.perf_counter() - started)
    return LookedUp(jobs, pending, seconds)


def score_components(
    jobs: Sequence[ComponentJob],
    records: Sequence[Record],
    cache: ScoreCache | None,
    pools: Pools | None = None,
    cancelled: threading.Event | None = None,
    seconds: list[list[float]] | None = None,
) -> list[list[Score]]:
    """Scores of every component (outer list, in spec order) for every record (inner list, in input order).

    When ``seconds`` is given it receives, in the same shape, the seconds each component spent on each record
    (0.0 for a cached score; a batch-scoring evaluator's records share its call's time equally).

    Cache look-ups run on the calling thread; a fully cached batch never pays for a thread hand-off. Components
    that still need evaluator calls are spread over ``pools`` (see :class:`Pools`), so a slow sandbox component
    does not wait behind a math component. Once ``cancelled`` is set, components not yet started are dropped.

    Args:
        jobs: The components, each bound to its evaluator and params.
        records: The records to score.
        cache: Where scores are looked up and kept; None scores everything anew.
        pools: Where components run; None runs them on the calling thread.
        cancelled: Set when the caller has gone: components not yet started are dropped.
        seconds: Filled with each component's seconds per record when given.

    Raises:
        ScoringCancelled: ``cancelled`` was set before every component had run.

    """
    pools = pools or Pools()
    looked = look_up_components(jobs, records, cache, timed=pools.observe is not None)
    columns = finish_components(looked, cache, pools, cancelled)
    if seconds is not None:
        seconds[:] = [p.seconds or [0.0] * len(records) for p in looked.pending]
    return columns


def finish_components(
    looked: LookedUp,
    cache: ScoreCache | None,
    pools: Pools | None = None,
    cancelled: threading.Event | None = None,
) -> list[list[Score]]:
    """The second phase of :func:`score_components`: the evaluator calls the look-ups left, over ``pools``.

    Args:
        looked: What :func:`look_up_components` found.
        cache: Where the new scores are kept; None keeps none.
        pools: Where components run; None runs them on the calling thread.
        cancelled: Set when the caller has gone: components not yet started are dropped.

    Raises:
        ScoringCancelled: ``cancelled`` was set before every component had run.

    """
    pools = pools or Pools()
    jobs, pending, seconds = looked.jobs, looked.pending, looked.seconds
    busy = [i for i, p in enumerate(pending) if not p.done]
    pinned = [i for i in busy if pools.sandbox is not None and jobs[i].evaluator.runs_code]
    flexible = [i for i in busy if i not in pinned]
    futures: dict[int, Future[list[Score]]] = {}
    for i in pinned:
        futures[i] = pools.sandbox.submit(  # type: ignore[union-attr]
            _complete, pending[i], cache, pools, cancelled, seconds[i]
        )
    if pools.components is not None:
        for i in flexible[1:]:
            futures[i] = pools.components.submit(_complete, pending[i], cache, pools, cancelled, seconds[i])
    columns: list[list[Score] | None] = [None] * len(jobs)
    try:
        for i, p in enumerate(pending):
            if i not in futures:
                columns[i] = _complete(p, cache, pools, cancelled, seconds[i])
        for i, future in futures.items():
            columns[i] = future.result()
    except BaseException:
        for future in futures.values():
            future.cancel()  # a component not started yet is dropped with the batch
        raise
    return [c if c is not None else [] for c in columns]


def _complete(
    pending: PendingComponent,
    cache: ScoreCache | None,
    pools: Pools,
    cancelled: threading.Event | None,
    looked_up: float,
) -> list[Score]:
    """One component's scores; ``observe`` gets its look-up and scoring time (a cached one is observed too)."""
    if not pending.done and cancelled is not None and cancelled.is_set():
        raise ScoringCancelled(f"component {pending.job.name!r} was not scored: the call was cancelled")
    if pools.observe is None:
        return complete(pending, cache, cancelled)
    started = time.perf_counter()
    scores = complete(pending, cache, cancelled)
    pools.observe(pending.job, scores, looked_up + time.perf_counter() - started)
    return scores
