"""A tenant writing as fast as it can is stopped by its project's storage quotas, on every protocol.

A real server process with quotas per project (``quotas.<project>``) and for every other project
(``default_quota``): a flood of datasets and runs over HTTP JSON, Connect and gRPC stores up to the quota and is
then refused ``resource_exhausted`` (HTTP 429) naming the quota and its value; another project is unaffected;
deleting frees room. Evaluators and jobs' output datasets (in the sandbox) count the same way.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalsi.server._proto.evalsi.v1alpha1 import evaluation_pb2 as epb
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb
from tests.server.calls import PROTOCOLS, Call, Outcome
from tests.server.evaluation import CAPITALS, chat, create_job, get, jsonl, upload, wait_built, wait_state
from tests.server.harness import ServerProcess, make_token, write_config

KIB = 1 << 10
MIB = 1 << 20
FLOOD_BYTES = 3 * MIB
"""``default_quota``'s dataset and run bytes on the test server."""
SMALL = {"max_datasets": 3, "max_runs": 3, "max_evaluators": 2}
"""Project ``small``'s own count quotas (its bytes are ``default_quota``'s)."""
REFUSED = {"http": "429", "connect": "resource_exhausted", "grpc": "resource_exhausted"}


def _dataset(dataset_id: str, size: int) -> Call:
    """CreateDataset of about ``size`` bytes of JSONL."""
    rows = [{"messages": [{"role": "user", "content": "x" * 500}], "ground_truth": "y"}] * max(1, size // 560)
    body = {"datasetId": dataset_id, "jsonl": jsonl(rows)}
    return Call("DatasetService", "CreateDataset", "/v1alpha1/datasets", epb.CreateDatasetRequest, body)


def _run(name: str, size: int) -> Call:
    """CreateRun of about ``size`` bytes of records."""
    records = [
        {"key": f"k{n}", "index": n, "samples": [{"completion": "x" * 500, "scores": {"m": {"value": 1.0}}}]}
        for n in range(max(1, size // 600))
    ]
    results = {"version": 1, "kind": "RunResults", "name": name, "records": records}
    return Call("RunService", "CreateRun", "/v1alpha1/runs", pb.CreateRunRequest, {"results": results})


@dataclass
class Storage:
    """The server under test and its tokens by project."""

    server: ServerProcess
    tokens: dict[str, str]
    directory: Path


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    directory = tmp_path_factory.mktemp("storage")
    url = f"sqlite:///{directory / 's.db'}"
    config = write_config(
        directory,
        {
            "database": {"url": url},
            "quotas": {"small": SMALL},
            "default_quota": {"max_dataset_bytes": FLOOD_BYTES, "max_run_bytes": FLOOD_BYTES},
            "datasets": {"max_bytes": 4 * MIB},
        },
    )
    tokens = {p: make_token(url, p, ["evaluations.run"]) for p in ("flood", "quiet", "small")}
    with ServerProcess(config) as server:
        yield Storage(server, tokens, directory)


def _total(storage: Storage, project: str, kind: str) -> int:
    """Bytes of the project's stored datasets (``sizeBytes`` summed over the listing)."""
    headers = {"Authorization": f"Bearer {storage.tokens[project]}"}
    listing = httpx.get(f"{storage.server.http}/v1alpha1/{kind}?pageSize=1000", headers=headers, timeout=60).json()
    return sum(int(item["sizeBytes"]) for item in listing[kind])


def _flood(storage: Storage, make: Any, size: int) -> tuple[list[Outcome], list[str]]:
    """Write ``size``-byte resources round the protocols until one is refused (at most 40: 20 MiB)."""
    outcomes: list[Outcome] = []
    protocols = itertools.cycle(PROTOCOLS)
    used = []
    for n in range(40):
        protocol = next(protocols)
        outcomes.append(make(f"flood-{n}", size).answer(protocol, storage.server, storage.tokens["flood"]))
        used.append(protocol)
        if outcomes[-1].status not in ("200", "ok"):
            break
    return outcomes, used


def test_a_flood_of_datasets_stops_at_the_projects_byte_quota(storage: Storage) -> None:
    outcomes, used = _flood(storage, _dataset, 512 * KIB)
    refused = outcomes[-1]
    assert refused.status == REFUSED[used[-1]], refused
    assert f"default_quota.max_dataset_bytes={FLOOD_BYTES}" in refused.message, refused
    assert all(o.status in ("200", "ok") for o in outcomes[:-1]) and len(outcomes) > 1
    assert _total(storage, "flood", "datasets") <= FLOOD_BYTES
    quiet = _dataset("quiet-1", 512 * KIB).answer("http", storage.server, storage.tokens["quiet"])
    assert quiet.status == "200", quiet  # another project's quota is its own
    gone = httpx.delete(
        f"{storage.server.http}/v1alpha1/datasets/flood-0",
        headers={"Authorization": f"Bearer {storage.tokens['flood']}"},
        timeout=60,
    )
    assert gone.status_code == 200, gone.text
    again = _dataset("flood-again", 256 * KIB).answer("grpc", storage.server, storage.tokens["flood"])
    assert again.status == "ok", again  # deleting gave the room back


def test_a_flood_of_runs_stops_at_the_projects_byte_quota(storage: Storage) -> None:
    outcomes, used = _flood(storage, _run, 512 * KIB)
    refused = outcomes[-1]
    assert refused.status == REFUSED[used[-1]], refused
    assert f"default_quota.max_run_bytes={FLOOD_BYTES}" in refused.message, refused
    assert len(outcomes) > 1 and all(o.status in ("200", "ok") for o in outcomes[:-1])
    headers = {"Authorization": f"Bearer {storage.tokens['flood']}"}
    runs = httpx.get(f"{storage.server.http}/v1alpha1/runs?pageSize=1000", headers=headers, timeout=60).json()["runs"]
    assert len(runs) == len(outcomes) - 1  # the refused run was not stored, not even in part
    assert _run("quiet-run", 512 * KIB).answer("connect", storage.server, storage.tokens["quiet"]).status == "ok"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_count_quotas_refuse_the_next_dataset_and_run_naming_the_quota(storage: Storage, protocol: str) -> None:
    token = storage.tokens["small"]
    for kind, make, quota in (("datasets", _dataset, "max_datasets"), ("runs", _run, "max_runs")):
        answers = [make(f"{protocol}-{kind}-{n}", KIB).answer(protocol, storage.server, token) for n in range(6)]
        stored = [a for a in answers if a.status in ("200", "ok")]
        refused = [a for a in answers if a.status == REFUSED[protocol]]
        assert len(stored) + len(refused) == len(answers), answers
        assert refused and all(f"quotas.small.{quota}={SMALL[quota]}" in a.message for a in refused), refused
        headers = {"Authorization": f"Bearer {token}"}
        listing = httpx.get(f"{storage.server.http}/v1alpha1/{kind}?pageSize=1000", headers=headers, timeout=60)
        assert len(listing.json()[kind]) == SMALL[quota]  # never one past the quota, whichever protocol filled it


@pytest.mark.sandbox
@pytest.mark.timeout(600)
def test_evaluators_and_job_outputs_count_against_the_quotas(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    storage_dir = Path(tempfile.mkdtemp(prefix="evalsi-quota-test-"))  # under /tmp: sandbox users must reach it
    rows = [chat(f"Capital of {c}?", f"It is {c}.", c) for c in ("France", "Peru", "Chad", "Oman")]
    source = jsonl(rows)
    quotas = {
        "jobs": {"max_evaluators": 1, "max_datasets": 2},
        "tight": {"max_dataset_bytes": len(source) + 64},  # room for the input, not for a scored copy of it
    }
    config = write_config(
        tmp_path, {"database": {"url": url}, "evaluators": {"storage_dir": str(storage_dir)}, "quotas": quotas}
    )
    every = ["evaluations.run", "resource.runs_code", "evaluators.write"]
    tokens = {p: make_token(url, p, every) for p in quotas}
    files = {"test_capitals.py": CAPITALS, "capitals.jsonl": source}
    entry = "test_capitals.py::test_capitals"
    with ServerProcess(config) as server:
        for token in tokens.values():
            assert upload(server, token, "capitals", files, entry).status_code == 200
            assert wait_built(server, token, "capitals", timeout=300)["state"] == "ACTIVE"
            body = {"datasetId": "questions", "jsonl": source}
            created = httpx.post(
                f"{server.http}/v1alpha1/datasets", json=body, headers={"Authorization": f"Bearer {token}"}
            )
            assert created.status_code == 200, created.text
        second = upload(server, tokens["jobs"], "again", files, entry)
        assert second.status_code == 429, second.text
        assert "quotas.jobs.max_evaluators=1" in second.json()["error"]["message"]
        # the project's first job writes its second dataset; a second job could not, and is refused at once
        assert create_job(server, tokens["jobs"], "j1", "capitals", "questions", "out-1").status_code == 200
        assert wait_state(server, tokens["jobs"], "j1", ("COMPLETED", "FAILED"), 300)["state"] == "COMPLETED"
        refused = create_job(server, tokens["jobs"], "j2", "capitals", "questions", "out-2")
        assert refused.status_code == 429 and "quotas.jobs.max_datasets=2" in refused.json()["error"]["message"]
        # a job whose output would pass the project's bytes fails naming the quota, and stores nothing
        assert create_job(server, tokens["tight"], "j3", "capitals", "questions", "scored").status_code == 200
        failed = wait_state(server, tokens["tight"], "j3", ("COMPLETED", "FAILED"), 300)
        assert failed["state"] == "FAILED" and "max_dataset_bytes" in failed["message"], failed
        assert get(server, tokens["tight"], "datasets/scored").status_code == 404
