"""Score components over a batch of records: cache look-up, de-duplication, then the evaluator's batch call."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from evalsi.engine._cache import ScoreCache
from evalsi.engine._keys import params_fingerprint, record_key
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
        fields_for = getattr(self.evaluator, "cache_fields", None)
        fields = tuple(fields_for(self.params)) if callable(fields_for) else self.evaluator.reads
        object.__setattr__(self, "fields", fields)


@dataclass
class PendingComponent:
    """One component after its cache look-up: the scores found, and the records still to score."""

    job: ComponentJob
    records: Sequence[Record]
    scores: list[Score | None]
    todo: dict[bytes, list[int]]
    """Content key -> positions of the records with that key that missed the cache."""

    @property
    def done(self) -> bool:
        """Every record has a score already."""
        return not self.todo


def look_up(job: ComponentJob, records: Sequence[Record], cache: ScoreCache | None) -> PendingComponent:
    """Key every record and take what the cache holds; identical records share one key (scored once)."""
    prefix = job.key_prefix
    fields = job.fields
    keys = [record_key(prefix, r, fields) for r in records]
    cached: list[Score | None] = cache.get_many(keys) if cache is not None else [None] * len(records)
    todo: dict[bytes, list[int]] = {}
    for position, (key, hit) in enumerate(zip(keys, cached, strict=True)):
        if hit is None:
            todo.setdefault(key, []).append(position)
    return PendingComponent(job, records, cached, todo)


def complete(pending: PendingComponent, cache: ScoreCache | None) -> list[Score]:
    """Score the records the cache missed in one ``score_batch`` call, store the results, return every score."""
    out = pending.scores
    if pending.todo:
        unique = [pending.records[positions[0]] for positions in pending.todo.values()]
        fresh = _call_evaluator(pending.job, unique)
        new_entries: list[tuple[bytes, Score]] = []
        for (key, positions), score in zip(pending.todo.items(), fresh, strict=True):
            for position in positions:
                out[position] = score
            new_entries.append((key, score))
        if cache is not None:
            cache.put_many(new_entries)
    return [s if s is not None else Score.error("internal: missing score") for s in out]


def score_component(job: ComponentJob, records: Sequence[Record], cache: ScoreCache | None) -> list[Score]:
    """Scores of one component for every record, in order.

    Cached scores are reused; identical records in the batch (GRPO repeats completions) are scored once; the
    evaluator sees only the records that still need a score, in one ``score_batch`` call. An exception or a
    wrong-length answer from the evaluator becomes an ``error`` score for the records it should have scored.
    """
    return complete(look_up(job, records, cache), cache)


def _call_evaluator(job: ComponentJob, records: list[Record]) -> list[Score]:
    try:
        scores = job.evaluator.score_batch(records, job.params, ScoreContext(component=job.name))
    except Exception as exc:  # the evaluator failed as a whole: every record it held errors, with the cause
        return [Score.error(f"{job.evaluator.name} failed: {type(exc).__name__}: {exc}")] * len(records)
    if len(scores) != len(records):
        reason = f"{job.evaluator.name} returned {len(scores)} scores for {len(records)} records"
        return [Score.error(reason)] * len(records)
    return [
        s if isinstance(s, Score) else Score.error(f"{job.evaluator.name} returned {s!r}, not a Score") for s in scores
    ]


def score_components(
    jobs: Sequence[ComponentJob],
    records: Sequence[Record],
    cache: ScoreCache | None,
    executor: ThreadPoolExecutor | None = None,
) -> list[list[Score]]:
    """Scores of every component (outer list, in spec order) for every record (inner list, in input order).

    Cache look-ups run on the calling thread. Components that still need evaluator calls run concurrently on
    ``executor`` when more than one does, so a slow sandbox component does not wait behind a math component; a
    fully cached batch never pays for a thread hand-off.
    """
    pending = [look_up(job, records, cache) for job in jobs]
    busy = [p for p in pending if not p.done]
    if executor is None or len(busy) < 2:
        return [complete(p, cache) for p in pending]
    futures = {id(p): executor.submit(complete, p, cache) for p in busy}
    return [futures[id(p)].result() if id(p) in futures else complete(p, cache) for p in pending]
