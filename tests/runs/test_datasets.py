"""Datasets: JSONL, JSON, CSV and Parquet with field maps and templates; pairing keys; clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalsi.errors import DataError
from evalsi.runs._datasets import load_items
from evalsi.specs import DatasetSpec
from tests.runs.conftest import write_jsonl

ROWS = [
    {"qid": 7, "question": "2+2?", "gold": "4", "topic": "arith"},
    {"qid": 8, "question": "3+3?", "gold": "6", "topic": "arith"},
]


def spec(path: Path, **fields: object) -> DatasetSpec:
    return DatasetSpec.model_validate({"path": str(path), **fields})


def write_all_formats(tmp_path: Path) -> list[Path]:
    jsonl = write_jsonl(tmp_path / "d.jsonl", ROWS)
    array = tmp_path / "d.json"
    array.write_text(json.dumps(ROWS))
    csv_file = tmp_path / "d.csv"
    csv_file.write_text("qid,question,gold,topic\n7,2+2?,4,arith\n8,3+3?,6,arith\n")
    parquet = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), parquet)
    return [jsonl, array, csv_file, parquet]


def test_every_format_maps_fields_the_same_way(tmp_path: Path) -> None:
    for path in write_all_formats(tmp_path):
        items = load_items(spec(path, fields={"prompt": "question", "reference": "gold", "id": "qid"}))
        assert [(i.prompt, i.reference, i.id, i.index) for i in items] == [
            ("2+2?", "4", "7", 0),
            ("3+3?", "6", "8", 1),
        ], path.suffix
        assert items[0].key == "7"  # an id pairs records across runs
        assert items[0].metadata == {"topic": "arith"}


def test_prompt_template_and_default_reference(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"q": "2+2?", "answer": "4", "topic": "arith"}])
    items = load_items(spec(path, promptTemplate="[{topic}] {q}\nAnswer:"))
    assert items[0].prompt == "[arith] 2+2?\nAnswer:"
    assert items[0].reference == "4"  # the first of reference, ground_truth, answer, ...
    assert items[0].id is None and len(items[0].key) == 64  # content hash


def test_chat_prompts_and_relative_paths(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "hi"}]
    write_jsonl(tmp_path / "chat.jsonl", [{"prompt": messages, "label": "hello"}])
    items = load_items(spec(Path("chat.jsonl")), base_dir=tmp_path)
    assert items[0].prompt == messages and items[0].reference == "hello"


def test_repeated_rows_get_distinct_keys(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "same"}, {"prompt": "same"}, {"prompt": "other"}])
    keys = [i.key for i in load_items(spec(path))]
    assert len(set(keys)) == 3 and keys[1] == keys[0] + "#2"


def test_errors_name_the_file_line_and_columns(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "ok"}\n\n{"question": "no prompt column"}\n')
    with pytest.raises(DataError, match=r"d\.jsonl:3: prompt column 'prompt' is missing \(columns: question\)"):
        load_items(spec(path))
    with pytest.raises(DataError, match=r"d\.jsonl:1: dataset.promptTemplate uses 'nope'"):
        load_items(spec(path, promptTemplate="{nope}"))
    table = tmp_path / "d.csv"
    table.write_text('answer,prompt\n1,ok\n2,"two\nlines"\n3\n')  # the last row (line 5) has no prompt
    with pytest.raises(DataError, match=r"d\.csv:5: prompt column 'prompt' is missing"):
        load_items(spec(table))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{not json\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2: not valid JSON"):
        load_items(spec(bad))
    with pytest.raises(DataError, match="no such file"):
        load_items(spec(tmp_path / "missing.csv"))


def test_hugging_face_datasets_by_name(tmp_path: Path) -> None:
    hf = DatasetSpec.model_validate(
        {"hf": str(tmp_path / "local-hf"), "split": "test", "fields": {"prompt": "problem"}}
    )
    (tmp_path / "local-hf").mkdir()
    write_jsonl(tmp_path / "local-hf" / "test.jsonl", [{"problem": "1+1?", "answer": "2"}])
    try:
        import datasets  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except ImportError:
        with pytest.raises(DataError, match="needs the `datasets` package"):
            load_items(hf)
    else:  # a dataset directory loads through `datasets` itself, offline
        items = load_items(hf)
        assert [(i.prompt, i.reference) for i in items] == [("1+1?", "2")]
