"""A run's records cut into shards that generate and score elsewhere, and the reports they send back.

The run's driver (:class:`~evalsi.runs.Runner` given ``shards=``) keeps the results file, the journal and
resuming: it cuts the records still to do into shards (:func:`cut_shards`), hands them to a
:class:`ShardRunner` (``evalsi.ray.RayShards`` runs each on a Ray cluster's CPU worker), and journals every
:class:`ShardReport` as it arrives. A shard generates and scores with the run's own pipeline
(:func:`~evalsi.runs._driver.run_shard`), so a sharded run's records are those an unsharded run writes.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from evalsi.runs._datasets import Item
from evalsi.runs._results import RecordResult
from evalsi.runs._targets import Generation, ModelFn

if TYPE_CHECKING:
    from evalsi.runs._bind import BoundRun

Scored = tuple[Item, list[Generation]]
"""A record's item and its generated samples, waiting to be scored."""


@dataclass(frozen=True)
class Shard:
    """One shard's work: records to generate and score, and records whose kept completions are scored again."""

    number: int
    items: tuple[Item, ...] = ()
    rescore: tuple[Scored, ...] = ()

    @property
    def keys(self) -> list[str]:
        """The pairing keys of every record of the shard."""
        return [item.key for item in self.items] + [item.key for item, _ in self.rescore]


@dataclass
class ShardReport:
    """What a shard finished since its last report: scored records, records that failed to generate, and more."""

    shard: int
    results: list[RecordResult] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    """Pairing key -> why generation failed (the record is generated again when the run is resumed)."""
    aborted: str | None = None
    """Why the shard stopped early (``onError: raise``); the driver then stops every shard."""
    generated: int = 0
    scoring_seconds: float = 0.0


class ShardRunner(Protocol):
    """Runs a run's shards somewhere (``evalsi.ray.RayShards``: on a Ray cluster) and streams their reports."""

    @property
    def count(self) -> int:
        """How many shards a run's records are cut into (fewer when there are fewer records)."""
        ...

    def run_shards(
        self, run: BoundRun, shards: Sequence[Shard], generated_by: str, fn: ModelFn | None
    ) -> AsyncGenerator[ShardReport, None]:
        """Every shard's reports, as they arrive; closing the generator stops the shards still working.

        A shard that is lost (its process or node died) is reported once with its unreported records as failed,
        so the run ends unfinished and a rerun resumes them.

        Args:
            run: The bound run.
            shards: The shards, from :func:`cut_shards`.
            generated_by: The run's generation fingerprint, stamped on every record.
            fn: An in-process model standing in for the spec's target (sent to the shards), if any.

        """
        ...


def cut_shards(todo: Sequence[Item], rescore: Sequence[Scored], count: int) -> list[Shard]:
    """Deal the records out to ``count`` shards in turn (record ``i`` to shard ``i % count``); no empty shard.

    Dealing in turn rather than in blocks spreads a dataset whose hard records sit together over every shard.

    Args:
        todo: Records to generate and score, in the run's order.
        rescore: Records whose completions are kept and scored again.
        count: How many shards at most.

    Returns:
        The non-empty shards, numbered from 0; each keeps the run's order.

    Raises:
        ValueError: ``count`` is below 1.

    """
    if count < 1:
        raise ValueError(f"shards must be at least 1, got {count}")
    work: list[Item | Scored] = [*todo, *rescore]
    dealt: list[list[Item | Scored]] = [work[start::count] for start in range(min(count, len(work)))]
    return [
        Shard(
            number,
            tuple(entry for entry in part if isinstance(entry, Item)),
            tuple(entry for entry in part if not isinstance(entry, Item)),
        )
        for number, part in enumerate(dealt)
    ]


def lost_shard_report(shard: Shard, reported: set[str], reason: str) -> ShardReport:
    """The report standing in for a shard that died: each record it did not report failed, saying why.

    Args:
        shard: The shard.
        reported: Keys the shard did report (scored or failed).
        reason: Why the shard stopped.

    Returns:
        A report failing the shard's other records.

    """
    message = f"shard {shard.number} stopped before this record was done: {reason}"
    return ShardReport(shard.number, failed={key: message for key in shard.keys if key not in reported})
