"""The run store on a real database: documents in and out, labels, pages, projects kept apart, the migration."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from alembic import command
from alembic.config import Config
from google.protobuf import json_format, struct_pb2
from sqlalchemy import Engine

from evalsi.runs import compare_runs
from evalsi.runs._compare import comparison_to_dict, run_from_document
from evalsi.server._db import MIGRATIONS, current_revision, head_revision, open_database, open_engine
from evalsi.server._errors import ServiceError
from evalsi.server.runs._requests import check_request_id
from evalsi.server.runs._store import RunStore, check_labels, page_size
from tests.server.postgres import fresh_database, running_postgres
from tests.server.runs_data import results_document


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("runs")
    return {"base": results_document(folder, "base"), "step": results_document(folder, "step", wrong=12)}


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = open_database(f"sqlite:///{tmp_path / 'server.db'}")
    yield engine
    engine.dispose()


def _same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN (an estimate over no records)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def exercise(store: RunStore, documents: dict[str, dict[str, Any]]) -> None:
    """What every database must do the same way."""
    base = store.create("alpha", documents["base"], {"training-run": "grpo-1", "training-step": "base"})
    step = store.create("alpha", documents["step"], {"training-run": "grpo-1", "training-step": "100"})
    other = store.create("beta", documents["step"], {"training-run": "grpo-1", "training-step": "100"})

    got = store.get("alpha", base.id)
    assert got.name == "base" and got.status == "complete" and got.record_count == 40
    assert got.summary == documents["base"]["summary"] and got.spec == documents["base"]["spec"]
    assert got.details["metrics"] == documents["base"]["metrics"] and got.details["onError"] == "zero"
    assert got.labels == {"training-run": "grpo-1", "training-step": "base"}

    # Records come back in dataset order, page by page, exactly as written.
    pages, token = [], ""
    while True:
        page, token = store.records("alpha", step.id, 7, token)
        pages.append(page)
        if not token:
            break
    assert [len(p) for p in pages] == [7, 7, 7, 7, 7, 5]
    assert [r for p in pages for r in p] == documents["step"]["records"]

    # Newest first; labels filter; pages do not overlap.
    first, token = store.find("alpha", {"training-run": "grpo-1"}, 1)
    second, end = store.find("alpha", {"training-run": "grpo-1"}, 1, token)
    assert [r.id for r in first + second] == [step.id, base.id] and end == ""
    assert [r.id for r in store.find("alpha", {"training-step": "base"}, 10)[0]] == [base.id]
    assert store.find("alpha", {"training-step": "base", "training-run": "other"}, 10)[0] == []
    assert [r.id for r in store.find("beta", {}, 10)[0]] == [other.id]

    # Another project's run is not found, never shown.
    for call in (lambda: store.get("beta", base.id), lambda: store.loaded("beta", base.id)):
        with pytest.raises(ServiceError) as refused:
            call()
        assert refused.value.status == "not_found" and "grpo" not in refused.value.message

    # Stored runs compare exactly as the files do.
    stored = compare_runs(store.loaded("alpha", base.id), store.loaded("alpha", step.id))
    local = compare_runs(
        run_from_document(documents["base"], "base.json"), run_from_document(documents["step"], "step.json")
    )
    assert _same([comparison_to_dict(c) for c in stored], [comparison_to_dict(c) for c in local])
    assert stored[0].metric == "exact-match" and stored[0].comparison.difference.mean == pytest.approx(-0.3)


def test_store_on_sqlite(engine: Engine, documents: dict[str, dict[str, Any]]) -> None:
    assert current_revision(engine) == head_revision()
    exercise(RunStore(engine), documents)


def test_store_on_postgresql(documents: dict[str, dict[str, Any]]) -> None:
    with running_postgres() as cluster:
        engine = open_database(fresh_database(cluster, "runs"))
        try:
            assert current_revision(engine) == head_revision()
            exercise(RunStore(engine), documents)
        finally:
            engine.dispose()


def test_the_migration_upgrades_a_database_at_the_first_revision(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = open_engine(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")
    assert current_revision(engine) == "0001"
    assert "runs" not in sqlalchemy.inspect(engine).get_table_names()
    engine.dispose()
    upgraded = open_database(url)
    try:
        assert current_revision(upgraded) == head_revision()
        assert {"runs", "run_labels", "run_records"} <= set(sqlalchemy.inspect(upgraded).get_table_names())
        columns = {c["name"] for c in sqlalchemy.inspect(upgraded).get_columns("runs")}
        assert {"request_id", "request_hash"} <= columns
    finally:
        upgraded.dispose()


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d.update(kind="RunSpec"), "results.kind"),
        (lambda d: d.update(version=2), "results.version"),
        (lambda d: d.update(name=""), "results.name"),
        (lambda d: d.update(summary=[1]), "results.summary"),
        (lambda d: d.update(records={"a": 1}), "results.records"),
        (lambda d: d["records"].__setitem__(3, {"index": 3}), "results.records[3]"),
        (lambda d: d["records"][5].update(samples=[1]), "results.records[5]"),
        (lambda d: d["records"].__setitem__(6, dict(d["records"][0])), "results.records[6]"),
    ],
)
def test_a_malformed_document_is_refused_naming_where(
    engine: Engine, documents: dict[str, dict[str, Any]], mutate: Any, where: str
) -> None:
    document = {**documents["base"], "records": [dict(r) for r in documents["base"]["records"]]}
    mutate(document)
    with pytest.raises(ServiceError) as refused:
        RunStore(engine).create("alpha", document, {})
    assert refused.value.status == "invalid_argument"
    assert f"`{where}`" in refused.value.message
    assert RunStore(engine).find("alpha", {}, 10)[0] == []  # nothing half-stored


def test_labels_and_page_sizes_are_checked() -> None:
    assert check_labels({"training-run": "grpo-1", "a.b/c_d": ""}) == {"training-run": "grpo-1", "a.b/c_d": ""}
    for bad in ({"-x": "1"}, {"x": 1}, {"": "v"}, ["x"], {"x": "v" * 501}):
        with pytest.raises(ServiceError, match="labels"):
            check_labels(bad)
    assert page_size(None, 100, 1000) == 100 and page_size("5", 100, 1000) == 5 and page_size(9999, 100, 1000) == 1000
    for size in (-1, "x", 1.5):
        with pytest.raises(ServiceError, match="pageSize"):
            page_size(size, 100, 1000)


def test_a_page_token_from_elsewhere_is_refused(engine: Engine, documents: dict[str, dict[str, Any]]) -> None:
    store = RunStore(engine)
    run = store.create("alpha", documents["base"], {})
    for token in ("garbage!", "cDEyYQ"):
        with pytest.raises(ServiceError, match="pageToken"):
            store.find("alpha", {}, 10, token)
        with pytest.raises(ServiceError, match="pageToken"):
            store.records("alpha", run.id, 10, token)


def stores_once(store: RunStore, documents: dict[str, dict[str, Any]]) -> None:
    """A create repeated with its request id stores one run, also when the repeats race each other."""
    labels = {"training-run": "grpo-1", "training-step": "100"}
    first = store.create("alpha", documents["step"], labels, "req-1")
    again = store.create("alpha", documents["step"], labels, "req-1")
    assert not first.replayed and again.replayed
    assert again.id == first.id and again.to_json() == first.to_json()
    assert [r.id for r in store.find("alpha", {}, 10)[0]] == [first.id]

    # The same id in another project is that project's own.
    assert store.create("beta", documents["step"], labels, "req-1").id != first.id

    # The same id with other results or other labels: a reused id, refused; nothing stored.
    for document, other in ((documents["base"], labels), (documents["step"], {**labels, "training-step": "200"})):
        with pytest.raises(ServiceError) as refused:
            store.create("alpha", document, other, "req-1")
        assert refused.value.status == "invalid_argument" and refused.value.code == "request_id_reused"
        assert "`requestId` 'req-1'" in refused.value.message
    # Whole-number floats (how gRPC and Connect carry every number) are the same request.
    as_doubles = json_format.MessageToDict(json_format.ParseDict(documents["step"], struct_pb2.Struct()))
    assert as_doubles["version"] == 1.0 and isinstance(as_doubles["version"], float)
    assert store.create("alpha", as_doubles, labels, "req-1").id == first.id

    # Eight threads send one create at once: one stores it, the others get its run.
    barrier = threading.Barrier(8)

    def send(_: int) -> str:
        barrier.wait()
        return store.create("alpha", documents["base"], {"training-step": "base"}, "req-race").id

    with ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(send, range(8)))
    assert len(ids) == 1
    assert [r.id for r in store.find("alpha", {"training-step": "base"}, 10)[0]] == list(ids)
    # Without a request id, each create is a run of its own.
    assert store.create("alpha", documents["base"], {}).id != store.create("alpha", documents["base"], {}).id


def test_a_request_id_stores_once_on_sqlite(engine: Engine, documents: dict[str, dict[str, Any]]) -> None:
    stores_once(RunStore(engine), documents)


def test_a_request_id_stores_once_on_postgresql(documents: dict[str, dict[str, Any]]) -> None:
    with running_postgres() as cluster:
        engine = open_database(fresh_database(cluster, "requests"))
        try:
            stores_once(RunStore(engine), documents)
        finally:
            engine.dispose()


def test_request_ids_are_checked() -> None:
    assert check_request_id(None) is None and check_request_id("") is None
    assert check_request_id("0b6f5c3e-8f7a-4c1e-9a57-1d2e3f405162") == "0b6f5c3e-8f7a-4c1e-9a57-1d2e3f405162"
    for bad in ("has space", "x" * 201, 7, "ü"):
        with pytest.raises(ServiceError, match="requestId"):
            check_request_id(bad)
