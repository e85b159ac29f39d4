"""The results file as one typed, versioned RunResult: written whole, read back through one migrating loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from evalsi.errors import DataError
from evalsi.runs import Runner, RunResult, load_results, load_run_result, run_from_mapping
from evalsi.runs._result_file import result_from_json
from evalsi.runs._results import read_results
from tests.helpers.openai_server import OpenAIServer
from tests.runs.conftest import run_spec

HEADER_KEYS = [
    "version",
    "kind",
    "name",
    "spec",
    "target",
    "fingerprints",
    "metrics",
    "onError",
    "status",
    "timings",
    "summary",
    "failed",
    "aborted",
]


def finished_run(server: OpenAIServer, qa_file: Path, out: Path) -> dict[str, Any]:
    outcome = Runner(run_from_mapping(run_spec(server, qa_file, out))).run()
    assert outcome.result is not None and outcome.result.status == "complete"
    data: dict[str, Any] = orjson.loads(out.read_bytes())
    return data


def test_the_file_keeps_its_keys_and_version_with_the_records_last(
    server: OpenAIServer, qa_file: Path, tmp_path: Path
) -> None:
    data = finished_run(server, qa_file, tmp_path / "r.json")
    assert data["version"] == 1 and data["kind"] == "RunResults"
    assert sorted(data) == sorted([*HEADER_KEYS, "records"]) and list(data)[-1] == "records"
    result = load_run_result(tmp_path / "r.json")
    assert isinstance(result, RunResult) and result.schema_version == 1
    assert result.name == "run" and [r["id"] for r in result.records] == ["a", "b", "c", "d"]
    assert result.summary is not None and result.summary.metrics["exact-match"].mean == pytest.approx(0.75)
    assert result.to_json() == read_results(tmp_path / "r.json")


def test_an_unversioned_file_is_migrated_on_read(server: OpenAIServer, qa_file: Path, tmp_path: Path) -> None:
    data = finished_run(server, qa_file, tmp_path / "r.json")
    old = tmp_path / "old.json"
    old.write_bytes(orjson.dumps({k: v for k, v in data.items() if k not in ("version", "kind")}))
    result = load_run_result(old)
    assert result.schema_version == 1 and result.kind == "RunResults"
    assert result.records == data["records"] and result.status == "complete"
    migrated = read_results(old)
    assert migrated["version"] == 1 and migrated["records"] == data["records"]
    assert sorted(migrated) == sorted(data)
    run = load_results(old)  # the comparison reader goes through the same loader
    assert [r.key for r in run.records] == [r["key"] for r in data["records"]]
    assert [m.name for m in run.metrics] == ["exact-match"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["records"][1]["samples"][0].__setitem__("tokens", "many"), "`records[1].samples[0].tokens`"),
        (lambda d: d["records"][2].pop("key"), "`records[2].key`: is missing"),
        (lambda d: d["summary"]["gates"].append({"metric": "m", "passed": "yes"}), "`summary.gates[0].passed`"),
        (lambda d: d.__setitem__("metrics", [{"threshold": 1}]), "`metrics[0].name`: is missing"),
        (lambda d: d.__setitem__("version", 7), "`version`: 7 is newer than this evalsi reads (1)"),
        (lambda d: d.__setitem__("version", "one"), "`version`: must be a whole number"),
        (lambda d: d.__setitem__("records", {"a": 1}), "`records`: must be a list"),
    ],
)
def test_a_bad_file_is_refused_naming_the_file_and_the_field(
    server: OpenAIServer, qa_file: Path, tmp_path: Path, change: Any, field: str
) -> None:
    data = finished_run(server, qa_file, tmp_path / "r.json")
    change(data)
    bad = tmp_path / "bad.json"
    bad.write_bytes(orjson.dumps(data))
    with pytest.raises(DataError) as caught:
        load_run_result(bad)
    assert str(bad) in str(caught.value) and field in str(caught.value)


def test_what_is_no_results_file_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_bytes(orjson.dumps({"name": "not a run"}))
    with pytest.raises(DataError, match="not an evalsi results file"):
        load_run_result(other)
    with pytest.raises(DataError, match="no such results file"):
        load_run_result(tmp_path / "missing.json")


def test_the_header_alone_is_read_without_the_records(server: OpenAIServer, qa_file: Path, tmp_path: Path) -> None:
    finished_run(server, qa_file, tmp_path / "r.json")
    header = load_run_result(tmp_path / "r.json", records=False)
    assert header.status == "complete" and header.records == []
    assert header.fingerprints is not None and "generation" in header.fingerprints


def test_a_document_in_a_request_is_migrated_and_named_under_its_field() -> None:
    """The loader reads a document already in memory (the server's CreateRun), naming fields under its prefix."""
    unversioned = {"name": "r", "records": [{"key": "a", "samples": []}]}
    result = result_from_json(unversioned, "request", prefix="results")
    assert result.to_json()["version"] == 1 and result.to_json()["kind"] == "RunResults"
    assert result.records == unversioned["records"]
    with pytest.raises(DataError, match=r"^request: `results\.records\[1\]\.key`: is missing$"):
        result_from_json({**unversioned, "records": [{"key": "a"}, {"samples": []}]}, "request", prefix="results")
    with pytest.raises(DataError, match=r"`results\.version`: 2 is newer than this evalsi reads \(1\)"):
        result_from_json({**unversioned, "version": 2, "kind": "RunResults"}, "request", prefix="results")
    with pytest.raises(DataError, match=r"`results\.kind`: not an evalsi results file"):
        result_from_json({"version": 1, "kind": "RunSpec", "name": "r"}, "request", prefix="results")
