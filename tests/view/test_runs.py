from __future__ import annotations

import mmap
from pathlib import Path

import orjson
import pytest

from evalsi.runs._results import read_results
from evalsi.view._runs import Records, _count, build_index, load_run, read_header, record_stats
from tests.view.make import HOSTILE, record, write_run


@pytest.mark.parametrize("window", [1, 3, 7, 8, 64, 1 << 20])
def test_count_in_windows_matches_bytes_count(window: int) -> None:
    data = b"x\n    {\n  y\n    {\n      z" * 5 + b"\n    {\n"
    assert _count(data, b"\n    {\n", 0, len(data), window) == data.count(b"\n    {\n") == 11
    assert _count(data, b"\n    {\n", 3, len(data) - 2, window) == data.count(b"\n    {\n", 3, len(data) - 2)


def test_records_found_lazily_equal_the_parsed_file_in_any_order(tmp_path: Path) -> None:
    tricky = ['a "quoted" {brace}\n    {\n not a record', HOSTILE, "ünïcode ✓", "}\n    },\n    {\n"]
    records = [
        record(i, [i % 2 == 0, None], completion=tricky[i % len(tricky)], prompt=[{"role": "user", "content": f"q{i}"}])
        for i in range(9)
    ]
    path = write_run(tmp_path / "r.results.json", "r", records)
    expected = read_results(path)["records"]
    run = load_run(path)
    assert len(run.records) == 9
    for i in (7, 2, 8, 0, 5, 1, 3, 4, 6):
        assert run.records[i] == expected[i]
    assert read_header(path)["name"] == "r"
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        body = data.find(b'\n  "records": [')
        assert _count(data, b"\n    {\n", body, len(data), 64) == 9  # the metrics list above is not counted


def test_an_empty_run_opens(tmp_path: Path) -> None:
    path = write_run(tmp_path / "e.results.json", "e", [])
    run = load_run(path)
    assert len(run.records) == 0 and run.index.keys == []
    assert orjson.loads(path.read_bytes())["records"] == []


@pytest.mark.parametrize("on_error", ["zero", "none"])
def test_the_row_index_agrees_with_each_records_own_columns(tmp_path: Path, on_error: str) -> None:
    records = [
        record(0, [True, None]),
        record(1, [0.25, 0.75]),
        record(2, [None]),
        record(3, [True], status="skipped"),
        record(4, []),
    ]
    path = write_run(tmp_path / "r.results.json", "r", records)
    run = load_run(path)
    index = build_index(run.records, ["acc"], on_error)  # type: ignore[arg-type]
    whole = Records(parsed=read_results(path)["records"])
    for i in range(len(records)):
        own = record_stats(whole[i], ["acc"], on_error)  # type: ignore[arg-type]
        assert index.statuses[i] == own.statuses
        for got, want in (
            (index.values["acc"][i], own.values[0]),
            (index.tokens[i], own.tokens),
            (index.latency[i], own.latency),
        ):
            assert got == pytest.approx(want, nan_ok=True)
    assert index.values["acc"][0] == (0.5 if on_error == "zero" else 1.0)
    assert index.values["acc"][1] == 0.5
    assert index.statuses[3] == frozenset({"skipped"})
