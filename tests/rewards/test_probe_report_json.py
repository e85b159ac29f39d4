"""The JSON form of a probe report's cells (``evalsi rewards probe --json``): names, order and nesting."""

from __future__ import annotations

import json

from evalsi.rewards.probes import Cell, Example, OracleCell

EXAMPLE = Example(row=3, variant="echo", value=1.0, status="ok", reason="matched", completion="42")
EXAMPLE_JSON = {"row": 3, "variant": "echo", "value": 1.0, "status": "ok", "reason": "matched", "completion": "42"}


def test_an_example_lists_its_fields_in_order() -> None:
    assert list(EXAMPLE.to_json().items()) == list(EXAMPLE_JSON.items())


def test_a_cell_leaves_out_its_probe_name_and_nests_its_example() -> None:
    cell = Cell(
        probe="echo-reference", applies=True, cases=4, earned=1, errored=2, skipped=1, best=1.0, example=EXAMPLE
    )
    assert json.dumps(cell.to_json()) == json.dumps(
        {"applies": True, "cases": 4, "earned": 1, "errored": 2, "skipped": 1, "best": 1.0, "example": EXAMPLE_JSON}
    )


def test_an_oracle_cell_without_an_example_says_so() -> None:
    cell = OracleCell(rows=5, failed=0, errored=1, worst=0.5)
    assert json.dumps(cell.to_json()) == json.dumps(
        {"rows": 5, "failed": 0, "errored": 1, "worst": 0.5, "example": None}
    )
