"""The plain numbers verl and OpenRLHF log per rollout: one row per result, or one column per key."""

from __future__ import annotations

import pytest

from evalsi.evaluators import Score
from evalsi.rewards import RewardResult, _batch
from evalsi.rewards._batch import PlainNumbers, plain_numbers
from evalsi.rewards._compose import ComponentRule

RULES = [ComponentRule("exact", 0.75), ComponentRule("format", 0.25, gate=True), ComponentRule("judge", 2.0)]
NAMES = [rule.name for rule in RULES]


def result(total: float | None, status: str, exact: Score, judge: Score) -> RewardResult:
    return RewardResult(total, status, {"exact": exact, "format": Score(True), "judge": judge})  # type: ignore[arg-type]


OK = result(2.75, "ok", Score(1.0), Score(True))
SKIPPED = result(1.25, "ok", Score(1.0), Score.skipped("no judge"))
ERRORED = result(0.25, "ok", Score.error("boom"), Score(0.0))
GATED = result(0.0, "gated", Score(1.0), Score(1.0))
NO_TOTAL = result(None, "no_total", Score(1.0), Score(1.0))


def test_a_row_holds_values_skip_flags_vector_and_weights_in_order() -> None:
    numbers = PlainNumbers(NAMES, RULES)
    row = numbers.row(SKIPPED)
    assert (
        list(row)
        == numbers.keys
        == [
            "exact",
            "format",
            "judge",
            "exact_skipped",
            "format_skipped",
            "judge_skipped",
            "reward/exact",
            "reward/format",
            "reward/judge",
            "reward_weight/exact",
            "reward_weight/format",
            "reward_weight/judge",
        ]
    )
    assert row["judge"] == 0.0 and row["judge_skipped"] == 1.0 and row["format"] == 1.0
    assert [row[f"reward_weight/{name}"] for name in NAMES] == [0.75, 0.25, 2.0]


@pytest.mark.parametrize(
    ("item", "values", "vector"),
    [
        (OK, [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]),  # pass/fail reads 1.0
        (SKIPPED, [1.0, 1.0, 0.0], [1.0, 1.0, 0.0]),
        (ERRORED, [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]),
        (GATED, [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]),  # a gated rollout counts nothing of any component
        (NO_TOTAL, [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]),
    ],
)
def test_values_read_zero_where_nothing_scored_and_the_vector_follows_the_total(
    item: RewardResult, values: list[float], vector: list[float]
) -> None:
    row = PlainNumbers(NAMES, RULES).row(item)
    assert [row[name] for name in NAMES] == values
    assert [row[f"reward/{name}"] for name in NAMES] == vector


@pytest.mark.parametrize("count", [0, 1, 2, 5])
def test_columns_are_the_rows_side_by_side_with_the_shared_values_repeated(count: int) -> None:
    numbers = PlainNumbers(NAMES, RULES)
    results = [OK, SKIPPED, ERRORED, GATED, NO_TOTAL][:count]
    columns = numbers.columns(results, {"reward/latency_ms": 3.0})
    assert list(columns) == [*numbers.keys, "reward/latency_ms"]
    assert columns["reward/latency_ms"] == [3.0] * count
    rows = [numbers.row(r) for r in results]
    assert all(columns[key] == [row[key] for row in rows] for key in numbers.keys)


def test_without_rules_only_values_and_flags() -> None:
    assert PlainNumbers(NAMES).keys == [*NAMES, *(f"{name}_skipped" for name in NAMES)]


def test_the_layout_is_kept_per_pair_of_lists() -> None:
    names, rules = list(NAMES), list(RULES)
    first = plain_numbers(names, rules)
    assert plain_numbers(names, rules) is first
    assert plain_numbers(list(NAMES), rules) is not first  # other lists (equal or not) get their own layout
    for _ in range(40):  # many short-lived lists: the kept layouts stay few, and each is right for its lists
        assert plain_numbers([*NAMES[:2]], RULES[:2]).keys[:2] == NAMES[:2]
    assert len(_batch._layouts) <= _batch._LAYOUTS_KEPT


@pytest.mark.parametrize("item", [OK, SKIPPED, ERRORED, GATED, NO_TOTAL])
def test_a_row_filled_into_a_framed_copy_is_the_row_between_the_keys_before_and_after(item: RewardResult) -> None:
    numbers = PlainNumbers(NAMES, RULES)
    blank = numbers.framed(("score",), ("latency",))
    assert numbers.framed(("score",), ("latency",)) is blank  # laid out once
    filled = numbers.row(item, blank.copy())
    filled["latency"] = 3.0
    filled["score"] = 7.0
    assert list(filled.items()) == [("score", 7.0), *numbers.row(item).items(), ("latency", 3.0)]
    assert set(blank.values()) == {0.0}  # the copy was filled, not the layout


def test_a_key_named_twice_keeps_its_first_place_and_its_last_value_in_a_framed_row() -> None:
    # a component called "exact_skipped" beside "exact": the flag of "exact" is written after the component
    rules = [ComponentRule("exact", 1.0), ComponentRule("exact_skipped", 1.0)]
    numbers = PlainNumbers([rule.name for rule in rules], rules)
    item = RewardResult(1.0, "ok", {"exact": Score.skipped("none"), "exact_skipped": Score(1.0)})
    filled = numbers.row(item, numbers.framed((), ("latency",)).copy())
    assert list(filled) == [*numbers.keys, "latency"]
    assert filled == {**numbers.row(item), "latency": 0.0}
    assert filled["exact_skipped"] == 1.0  # the flag of "exact", written after the component's value
