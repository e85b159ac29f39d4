"""The dataset, evaluator and job services on a real database, called with plain data and answering plain data.

Transport reads each protocol's request into the services' arguments and writes their answers as messages; the
services themselves never see a protobuf message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf.message import Message
from sqlalchemy import Engine

from evalsi.server._config import config_from_mapping
from evalsi.server._db import open_database
from evalsi.server._errors import ServiceError
from evalsi.server._tokens import EVALUATORS_WRITE, RUN, Principal
from evalsi.server.evaluation._datasets import Dataset, Datasets
from evalsi.server.evaluation._pages import Page
from evalsi.server.evaluation.evaluators._service import Evaluators
from evalsi.server.evaluation.jobs._service import Jobs, JobSpec
from evalsi.server.transport import _evaluation_messages as messages

ALPHA = Principal("alpha", frozenset({RUN, EVALUATORS_WRITE}))
BETA = Principal("beta", frozenset({RUN}))
ROW = '{"messages":[{"role":"user","content":"2+2?"},{"role":"assistant","content":"4"}]}\n'
"""One row as the service stores it (compact JSON, one line)."""


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = open_database(f"sqlite:///{tmp_path / 'server.db'}")
    yield engine
    engine.dispose()


def test_datasets_are_created_read_listed_and_deleted_as_plain_data(tmp_path: Path, engine: Engine) -> None:
    service = Datasets(config_from_mapping({}, tmp_path), engine)
    created = [service.create(ALPHA, f"d{n}", ROW * (n + 1)) for n in range(3)]

    assert all(type(d) is Dataset and not isinstance(d, Message) for d in created)
    assert [(d.dataset_id, d.row_count, d.jsonl) for d in created] == [("d0", 1, ""), ("d1", 2, ""), ("d2", 3, "")]
    got = service.get(ALPHA, "datasets/d1", rows=True)
    assert got.jsonl.splitlines() == [ROW.strip()] * 2 and got.size_bytes == len(got.jsonl.encode())
    first = service.listing(ALPHA, 2, "")
    assert type(first) is Page and [d.dataset_id for d in first.items] == ["d2", "d1"] and first.next_page_token
    rest = service.listing(ALPHA, 2, first.next_page_token)
    assert [d.dataset_id for d in rest.items] == ["d0"] and rest.next_page_token == ""
    assert service.listing(BETA, 0, "").items == []
    with pytest.raises(ServiceError) as other:
        service.get(BETA, "d1", rows=False)
    assert other.value.status == "not_found" and "no dataset 'd1' in project 'beta'" in other.value.message
    with pytest.raises(ServiceError) as taken:
        service.create(ALPHA, "d1", ROW)
    assert taken.value.status == "failed_precondition" and "already exists" in taken.value.message
    assert service.delete(ALPHA, "d1") == "datasets/d1"
    with pytest.raises(ServiceError) as gone:
        service.delete(ALPHA, "d1")
    assert gone.value.status == "not_found"


def test_transport_writes_a_dataset_and_its_page_as_their_messages(tmp_path: Path, engine: Engine) -> None:
    service = Datasets(config_from_mapping({}, tmp_path), engine)
    service.create(ALPHA, "d", ROW)
    message = messages.dataset(service.get(ALPHA, "d", rows=True))
    assert (message.name, message.dataset_id, message.row_count, message.jsonl) == ("datasets/d", "d", 1, ROW)
    assert message.create_time.endswith("Z")
    listed = messages.datasets(service.listing(ALPHA, 0, ""))
    assert [d.dataset_id for d in listed.datasets] == ["d"] and listed.datasets[0].jsonl == ""


def test_jobs_refuse_an_unknown_state_or_evaluator_before_reading_with_plain_arguments(
    tmp_path: Path, engine: Engine
) -> None:
    config = config_from_mapping({"evaluators": {"storage_dir": str(tmp_path / "evaluators")}}, tmp_path)
    evaluators = Evaluators(config, engine, "namespaced")
    jobs = Jobs(config, engine, evaluators, Datasets(config, engine), "namespaced")
    try:
        with pytest.raises(ServiceError) as state:
            jobs.listing(ALPHA, 0, "", state="DONE")
        assert state.value.status == "invalid_argument" and "'DONE' is not a job state" in state.value.message
        assert jobs.listing(ALPHA, 0, "", state="RUNNING", evaluator="evaluators/e") == Page([], "")
        with pytest.raises(ServiceError) as missing:
            jobs.create(ALPHA, JobSpec(evaluator="e", input_dataset="in", output_dataset="out"), "j")
        assert missing.value.status == "not_found" and "evaluationJob.evaluator" in missing.value.message
        assert dataclasses.is_dataclass(JobSpec) and evaluators.listing(ALPHA, 0, "") == Page([], "")
    finally:
        jobs.close()
        evaluators.close()
