"""The run list reads headers alone, from a bounded prefix, and survives a broken run; open runs are kept in bytes."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from evalsi.errors import DataError
from evalsi.runs._results import read_results
from evalsi.view import create_app
from evalsi.view._runs import MAX_HEADER_BYTES, RunCache, RunData, load_run, read_header
from tests.view.make import record, simple_run, write_run


def _header(document: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k != "records"}


def _tricky(tmp_path: Path) -> dict[str, Any]:
    """A real results document whose header holds "records" everywhere but as its own top-level key."""
    path = simple_run(tmp_path / "real.results.json", "records", [True, False, True])
    document = read_results(path)
    document["spec"]["notes"] = {"records": [1, 2], "text": 'a "records": [ and } { ] [ "inside" a string \\'}
    document["fingerprints"]["records"] = "records"
    return document


def _layout(document: dict[str, Any], layout: str) -> bytes:
    if layout == "indented":  # what `evalsi run` writes
        return orjson.dumps(document, option=orjson.OPT_INDENT_2)
    if layout == "compact":  # what the server and RunsClient.document give
        return orjson.dumps(document)
    return orjson.dumps({"records": document["records"], **_header(document)})


LAYOUTS = ["indented", "compact", "records first"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_header_is_everything_but_the_records_in_any_layout(tmp_path: Path, layout: str) -> None:
    document = _tricky(tmp_path)
    path = tmp_path / "r.results.json"
    path.write_bytes(_layout(document, layout))
    assert read_header(path) == _header(document)


def test_listing_never_reads_past_the_header_of_a_compact_file(tmp_path: Path) -> None:
    document = read_results(simple_run(tmp_path / "small.results.json", "small", [True, False]))
    head = orjson.dumps({**_header(document), "records": []})[: -len(b"[]}")]
    assert head.endswith(b'"records":')
    # The records are 64 MiB of bytes no JSON parser accepts: a reader that went past the header would fail.
    big = tmp_path / "big.results.json"
    with big.open("wb") as handle:
        handle.write(head + b"[")
        handle.write(b"\x00not json\x00" * (8 << 20))
    assert big.stat().st_size > 4 * MAX_HEADER_BYTES
    assert read_header(big) == _header(document)
    client = TestClient(create_app([tmp_path]))
    listed = {item["label"]: item for item in client.get("/api/sources").json()["runs"]}
    assert listed["big.results.json"]["name"] == "small" and "error" not in listed["big.results.json"]
    assert listed["big.results.json"]["metrics"] == listed["small.results.json"]["metrics"]


def test_a_header_larger_than_the_bound_is_listed_with_the_reason(tmp_path: Path) -> None:
    document = read_results(simple_run(tmp_path / "r.results.json", "r", [True]))
    document["spec"]["padding"] = "x" * (MAX_HEADER_BYTES + 1)
    path = tmp_path / "padded.results.json"
    path.write_bytes(orjson.dumps(document))
    with pytest.raises(DataError, match="too large to list"):
        read_header(path)
    client = TestClient(create_app([path]))
    [item] = client.get("/api/sources").json()["runs"]
    assert "too large to list" in item["error"]
    assert client.get(f"/api/runs/{item['id']}").json()["name"] == "r"  # opening it reads it whole


BROKEN_HEADERS = [
    ({"summary": {"gates": [5]}}, "`summary.gates[0]`: must be an object"),
    ({"summary": {"metrics": [1]}}, "`summary.metrics`: must be an object"),
    ({"timings": {"finished": 20260101}}, "`timings.finished`: must be a string"),
    ({"metrics": "acc"}, "`metrics`: must be a list"),
]


@pytest.mark.parametrize(("patch", "reason"), BROKEN_HEADERS)
def test_a_run_with_a_malformed_header_is_listed_as_unreadable_and_the_list_still_shows(
    tmp_path: Path, patch: dict[str, Any], reason: str
) -> None:
    simple_run(tmp_path / "good.results.json", "good", [True, False])
    document = read_results(simple_run(tmp_path / "bad.results.json", "bad", [True]))
    (tmp_path / "bad.results.json").write_bytes(orjson.dumps({**document, **patch}, option=orjson.OPT_INDENT_2))
    client = TestClient(create_app([tmp_path]))
    page = client.get("/")
    assert page.status_code == 200 and reason in page.text
    items = {item["label"]: item for item in client.get("/api/sources").json()["runs"]}
    assert items["bad.results.json"]["status"] == "unreadable" and reason in items["bad.results.json"]["error"]
    assert items["good.results.json"]["name"] == "good"
    opened = client.get(f"/api/runs/{items['bad.results.json']['id']}")
    assert opened.status_code == 422 and reason in opened.json()["error"]


def _runs(tmp_path: Path, count: int, records: int) -> list[Path]:
    return [
        write_run(
            tmp_path / f"r{n}.results.json",
            f"r{n}",
            [record(i, [i % 2 == 0], completion=f"{n}-{i} " + "y" * 2000) for i in range(records)],
        )
        for n in range(count)
    ]


def test_open_runs_are_kept_within_a_byte_budget(tmp_path: Path) -> None:
    paths = _runs(tmp_path, 4, 100)
    one = load_run(paths[0]).cost
    assert one >= 2 * paths[0].stat().st_size  # the bytes, and about as much again for the index and search text
    cache = RunCache(max_bytes=int(2.5 * one))
    loads: list[Path] = []

    def load(path: Path) -> RunData:
        loads.append(path)
        return load_run(path)

    for path in paths:
        assert cache.get(path, None, load).name == path.name.split(".")[0]
        assert cache.held_bytes <= cache.max_bytes and len(cache) <= 2
    assert loads == paths
    cache.get(paths[3], None, load)  # kept: not read again
    cache.get(paths[0], None, load)  # dropped long ago: read again
    assert loads == [*paths, paths[0]] and cache.evictions == 3


def test_a_run_larger_than_the_budget_is_kept_alone_while_it_is_read(tmp_path: Path) -> None:
    (tmp_path / "big").mkdir()
    small, large = _runs(tmp_path, 1, 5)[0], _runs(tmp_path / "big", 1, 200)[0]
    cache = RunCache(max_bytes=load_run(small).cost + 1)
    cache.get(small)
    run = cache.get(large)
    assert len(cache) == 1 and cache.held_bytes == run.cost > cache.max_bytes
    assert cache.get(large) is run


def test_a_run_asked_for_by_many_requests_at_once_is_read_once(tmp_path: Path) -> None:
    path = _runs(tmp_path, 1, 300)[0]
    cache = RunCache()
    started = threading.Barrier(8)
    loads: list[Path] = []
    lock = threading.Lock()

    def load(p: Path) -> RunData:
        with lock:
            loads.append(p)
        return load_run(p)

    def ask() -> None:
        started.wait(60)
        cache.get(path, "v1", load)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert loads == [path]
    cache.get(path, "v2", load)  # another version is read again
    assert loads == [path, path]
