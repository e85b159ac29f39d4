"""Records and scores as plain tuples between a pool's processes: what Ray pickles fastest.

Ray pickles with cloudpickle, which calls back into Python (``reducer_override``) for every object of a class
of its own, a ``Record`` or a ``Score`` included, and that callback costs far more than the object's fields
(a chunk of 256 records and its 768 scores paid milliseconds of it at each hop, more when the node is busy).
Tuples of strings, numbers, lists and dicts go through the C pickler without it. So records travel caller →
coordinator → actor, and scores actor → coordinator → caller (the shared cache's verdicts both ways), as
tuples of their fields; each side builds the objects back only where it reads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from evalsi.evaluators import Score
from evalsi.records import Record

PackedRecord = tuple[Any, ...]
"""A record's fields in constructor order: completion, prompt, reference, completion_tokens, id, metadata."""
PackedScore = tuple[Any, ...]
"""A score's fields in constructor order: value, status, reason, details."""
PackedRow = tuple[PackedScore, ...]
"""One record's scores, one per component in spec order."""


def pack_records(records: Iterable[Record]) -> list[PackedRecord]:
    """Each record as the tuple of its fields.

    Args:
        records: The records.

    """
    return [(r.completion, r.prompt, r.reference, r.completion_tokens, r.id, r.metadata) for r in records]


def unpack_records(packed: Iterable[PackedRecord]) -> list[Record]:
    """The records back from :func:`pack_records`.

    Args:
        packed: Records as tuples.

    """
    return [Record(*fields) for fields in packed]


def pack_score(score: Score) -> PackedScore:
    """A score as the tuple of its fields.

    Args:
        score: The score.

    """
    return (score.value, score.status, score.reason, score.details)


def unpack_score(packed: PackedScore) -> Score:
    """The score back from :func:`pack_score`.

    Args:
        packed: A score as a tuple.

    """
    return Score(*packed)


def pack_rows(columns: Sequence[Sequence[Score]], count: int) -> list[PackedRow]:
    """Scores indexed ``[component][record]`` as one packed row per record.

    Args:
        columns: The scores by component, then record.
        count: Records (the rows to give when there is no component).

    """
    if not columns:
        return [() for _ in range(count)]
    return [tuple(map(pack_score, row)) for row in zip(*columns, strict=True)]


def unpack_columns(rows: Sequence[PackedRow], width: int) -> list[list[Score]]:
    """Packed rows back as scores indexed ``[component][record]``.

    Args:
        rows: One packed row per record.
        width: Components of the spec.

    """
    return [[Score(*row[component]) for row in rows] for component in range(width)]
