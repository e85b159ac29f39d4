"""Records and scores between a pool's processes: plain tuples, back to equal objects."""

from __future__ import annotations

import pickle

from evalsi.evaluators import Score
from evalsi.ray._wire import (
    PART_BYTES,
    from_parts,
    join_keys,
    pack_records,
    pack_rows,
    split_keys,
    to_parts,
    unpack_columns,
    unpack_records,
)
from evalsi.records import Record

RECORDS = [
    Record(completion="\\boxed{4}", prompt="2+2?", reference="4", completion_tokens=7, id="r0"),
    Record(
        completion=[{"role": "assistant", "content": "four"}],
        prompt=[{"role": "user", "content": "2+2?"}],
        reference={"answer": 4, "aliases": ["four"]},
        metadata={"group_id": "g1", "index": 3},
    ),
    Record(completion=""),
]
COLUMNS = [
    [Score(True), Score(0.5, reason="half"), Score(None, "skipped", "no reference")],
    [Score(1.0, details={"method": "numeric", "parts": [1, 2]}), Score(None, "error", "timed out"), Score(False)],
]


def test_records_come_back_equal() -> None:
    assert unpack_records(pack_records(RECORDS)) == RECORDS


def test_scores_come_back_equal_by_component_and_record() -> None:
    rows = pack_rows(COLUMNS, len(RECORDS))
    assert len(rows) == len(RECORDS)
    assert unpack_columns(rows, len(COLUMNS)) == COLUMNS
    assert unpack_columns(pack_rows([], 2), 0) == []
    assert pack_rows([], 2) == [(), ()]


def test_what_travels_names_no_class_so_no_pickler_callback_runs() -> None:
    for packed in (pack_records(RECORDS), pack_rows(COLUMNS, len(RECORDS))):
        data = pickle.dumps(packed, protocol=5)
        assert b"evalsi" not in data
        assert pickle.loads(data) == packed


def test_a_chunk_travels_in_parts_under_the_inline_threshold_and_comes_back_in_order() -> None:
    records = [Record(completion=f"step {i}: " + "x" * (300 + i % 700), prompt=f"problem {i}") for i in range(600)]
    packed = pack_records(records)
    parts = to_parts(packed)
    assert len(parts) > 1
    assert all(len(part) <= PART_BYTES for part in parts)
    assert unpack_records(from_parts(parts)) == records
    assert all(b"evalsi" not in part for part in parts)


def test_a_small_chunk_is_one_part_and_a_record_larger_than_a_part_travels_alone() -> None:
    packed = pack_records(RECORDS)
    assert len(to_parts(packed)) == 1
    assert from_parts(to_parts([])) == []
    huge = pack_records([Record(completion="y" * 200), Record(completion="z" * 5000), Record(completion="w")])
    parts = to_parts(huge, limit=1000)
    assert [len(pickle.loads(part)) for part in parts] == [1, 1, 1]
    assert from_parts(parts) == huge


def test_content_keys_travel_one_byte_string_per_component_and_come_back_by_component() -> None:
    keys = [(bytes([i]) * 32, bytes([100 + i]) * 32) for i in range(5)]
    joined = join_keys(keys)
    assert joined is not None and [len(column) for column in joined] == [160, 160]
    assert split_keys(joined, 5) == [[row[0] for row in keys], [row[1] for row in keys]]
    assert join_keys([]) is None and join_keys([(b"short",)]) is None and join_keys([(), ()]) is None
    assert split_keys(joined, 4) is None and split_keys(None, 5) is None
