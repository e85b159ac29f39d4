"""Units of whole groups: what a reward pool keeps together in one chunk for a spec with group-level components."""

from __future__ import annotations

from evalsi.ray._coordinator import group_units
from evalsi.records import Record


def test_each_group_falls_in_one_unit_in_order_of_first_appearance() -> None:
    records = [Record(completion=str(i), prompt=f"p{i % 3}") for i in range(9)]
    assert group_units(records, [None]) == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]


def test_a_group_id_comes_before_the_prompt_and_a_field_can_be_named() -> None:
    records = [
        Record(completion="a", prompt="x", metadata={"group_id": 1}),
        Record(completion="b", prompt="y", metadata={"group_id": 1}),
        Record(completion="c", prompt="x"),
        Record(completion="d", prompt="z", metadata={"index": 7}),
        Record(completion="e", prompt="w", metadata={"index": 7}),
    ]
    assert group_units(records, [None]) == [[0, 1], [2], [3], [4]]
    assert group_units(records, ["metadata.index"]) == [[0], [1], [2], [3, 4]]


def test_components_grouping_differently_join_their_groups_into_one_unit() -> None:
    # by group_id: {0, 1}, {2, 3}; by prompt: {1, 2}; together one unit, so no chunk splits either grouping
    records = [
        Record(completion="a", prompt="p", metadata={"group_id": "g"}),
        Record(completion="b", prompt="q", metadata={"group_id": "g"}),
        Record(completion="c", prompt="q", metadata={"group_id": "h"}),
        Record(completion="d", prompt="r", metadata={"group_id": "h"}),
        Record(completion="e", prompt="s", metadata={"group_id": "k"}),
    ]
    assert group_units(records, [None]) == [[0, 1], [2, 3], [4]]
    assert group_units(records, [None, "prompt"]) == [[0, 1, 2, 3], [4]]


def test_a_record_with_no_group_is_a_unit_of_its_own() -> None:
    records = [Record(completion="a"), Record(completion="b"), Record(completion="c", prompt="p")]
    assert group_units(records, [None]) == [[0], [1], [2]]
