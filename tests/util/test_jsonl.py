"""JSON Lines: blank lines skipped, each value with its line number, a bad line named by file and line."""

from __future__ import annotations

import pytest

from evalsi._util.jsonl import json_lines
from evalsi.errors import DataError


def test_values_come_with_their_line_numbers_and_blank_lines_are_skipped() -> None:
    raw = b'{"a": 1}\n\n   \n[2, 3]\n"text"\n'
    assert list(json_lines(raw, "rows.jsonl")) == [(1, {"a": 1}), (4, [2, 3]), (5, "text")]


def test_a_bad_line_is_named_by_file_and_line() -> None:
    with pytest.raises(DataError, match="not valid JSON") as caught:
        list(json_lines(b'{"a": 1}\n{"a": \n', "rows.jsonl"))
    assert (caught.value.file, caught.value.line) == ("rows.jsonl", 2)
    assert str(caught.value).startswith("rows.jsonl:2")
