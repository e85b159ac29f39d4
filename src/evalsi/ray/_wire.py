"""Records and scores as plain tuples between a pool's processes: what Ray pickles fastest.

Ray pickles with cloudpickle, which calls back into Python (``reducer_override``) for every object of a class
of its own, a ``Record`` or a ``Score`` included, and that callback costs far more than the object's fields
(a chunk of 256 records and its 768 scores paid milliseconds of it at each hop, more when the node is busy).
Tuples of strings, numbers, lists and dicts go through the C pickler without it. So records travel caller →
coordinator → actor, and scores actor → coordinator → caller (the shared cache's verdicts both ways), as
tuples of their fields; each side builds the objects back only where it reads them.

A chunk's records also travel pickled, in parts of at most :data:`PART_BYTES` each, one call argument per part
(:func:`to_parts`). Ray sends an argument smaller than its inline threshold (100 KiB unless the cluster sets
``max_direct_call_object_size``) inside the call itself; a larger one it puts in the object store, for the
receiver to fetch: a put, a fetch and their bookkeeping at each hop, milliseconds for a chunk of 256 rollouts
of a few hundred characters each (170 KiB). The parts are pickled here once; Ray then copies them as bytes.
"""

from __future__ import annotations

import math
import pickle
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
PART_BYTES = 64 * 1024
"""Most bytes of one part of a chunk's records (under Ray's default inline threshold of 100 KiB, with room)."""


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


def to_parts(packed: Sequence[PackedRecord], limit: int = PART_BYTES) -> list[bytes]:
    """Packed records pickled in consecutive parts of at most ``limit`` bytes each (a lone larger record alone).

    Args:
        packed: Records as tuples, in order.
        limit: Most bytes of one part.

    """
    data = pickle.dumps(list(packed), protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) <= limit or len(packed) <= 1:
        return [data]
    count = math.ceil(len(data) / limit)
    step = math.ceil(len(packed) / count)
    return [part for start in range(0, len(packed), step) for part in to_parts(packed[start : start + step], limit)]


def from_parts(parts: Iterable[bytes]) -> list[PackedRecord]:
    """The packed records back from :func:`to_parts`, in order.

    Args:
        parts: The pickled parts, in order.

    """
    return [record for part in parts for record in pickle.loads(part)]


KEY_BYTES = 32
"""Bytes of one content key (a sha256 digest)."""


def join_keys(keys: Sequence[Sequence[bytes]]) -> list[bytes] | None:
    """Records' content keys (by record, then component) as one byte string per component; None if any is amiss.

    Args:
        keys: Each record's key under each component, in spec order.

    """
    width = len(keys[0]) if keys else 0
    if not width or any(len(row) != width or any(len(key) != KEY_BYTES for key in row) for row in keys):
        return None
    return [b"".join(row[component] for row in keys) for component in range(width)]


def split_keys(joined: Sequence[bytes] | None, count: int) -> list[list[bytes]] | None:
    """The keys of :func:`join_keys` by component, then record, for ``count`` records (None: none sent, or amiss).

    Args:
        joined: One byte string per component.
        count: Records.

    """
    if not joined or any(len(column) != KEY_BYTES * count for column in joined):
        return None
    return [[column[at : at + KEY_BYTES] for at in range(0, len(column), KEY_BYTES)] for column in joined]


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
