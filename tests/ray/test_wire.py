"""Records and scores between a pool's processes: plain tuples, back to equal objects."""

from __future__ import annotations

import pickle

from evalsi.evaluators import Score
from evalsi.ray._wire import pack_records, pack_rows, unpack_columns, unpack_records
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
