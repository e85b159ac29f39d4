"""``target.baseUrls``: a run spread over replicas of one model, one of them killed mid-run, nothing lost."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from evalsi.errors import SpecError
from evalsi.runs import Runner, run_from_mapping
from tests.helpers.openai_server import OpenAIServer

RECORDS = 240


def write_data(path: Path) -> Path:
    path.write_text("".join(f'{{"id": "r{i}", "prompt": "q{i}", "answer": "ok"}}\n' for i in range(RECORDS)))
    return path


def spec(urls: list[str], data: Path, output: Path, **target: Any) -> dict[str, Any]:
    return {
        "target": {"baseUrls": urls, "model": "m", "maxConcurrency": 12, "retryBackoff": 0.05, **target},
        "dataset": {"path": str(data)},
        "evaluators": [{"ref": "exact-match"}],
        "output": str(output),
    }


def test_requests_split_evenly_over_three_replicas(tmp_path: Path) -> None:
    servers = [OpenAIServer(default="ok", delay=0.02).start() for _ in range(3)]
    try:
        run = run_from_mapping(spec([s.base_url for s in servers], write_data(tmp_path / "d.jsonl"), tmp_path / "r"))
        outcome = Runner(run).run()
    finally:
        for server in servers:
            server.stop()
    counts = [s.request_count() for s in servers]
    assert outcome.verdict == "ok" and len(outcome.records) == RECORDS and sum(counts) == RECORDS
    assert all(RECORDS / 3 * 0.6 <= c <= RECORDS / 3 * 1.4 for c in counts), counts
    assert outcome.summary.metrics["exact-match"].mean == 1.0


@pytest.mark.parametrize("replicas", [2, 3])
def test_a_replica_killed_mid_run_loses_no_record(tmp_path: Path, replicas: int) -> None:
    servers = [OpenAIServer(default="ok", delay=0.02).start() for _ in range(replicas)]
    victim = servers[0]
    killed = threading.Event()

    def kill_after_some() -> None:
        deadline = time.monotonic() + 120
        while victim.request_count() < 20 and time.monotonic() < deadline:
            time.sleep(0.005)
        victim.stop()  # its open requests lose their connections; the port then refuses
        killed.set()

    killer = threading.Thread(target=kill_after_some, daemon=True)
    try:
        killer.start()
        run = run_from_mapping(spec([s.base_url for s in servers], write_data(tmp_path / "d.jsonl"), tmp_path / "r"))
        outcome = Runner(run).run()
        killer.join(120)
    finally:
        for server in servers:
            server.stop()
    assert killed.is_set()
    assert outcome.verdict == "ok" and not outcome.failed, outcome.failed
    assert len(outcome.records) == RECORDS and outcome.summary.metrics["exact-match"].mean == 1.0
    survivors = [s.statuses.count(200) for s in servers[1:]]
    answered = victim.statuses.count(200) + sum(survivors)
    assert answered >= RECORDS  # every record answered (a request the victim held when killed, elsewhere)
    assert 20 <= victim.request_count() < RECORDS / replicas  # it took its share until it died
    if replicas == 3:  # the survivors shared the rest
        assert min(survivors) >= 0.6 * max(survivors), survivors


def test_a_results_file_records_the_replicas(tmp_path: Path) -> None:
    with OpenAIServer(default="ok") as a, OpenAIServer(default="ok") as b:
        run = run_from_mapping(spec([a.base_url, b.base_url], write_data(tmp_path / "d.jsonl"), tmp_path / "r"))
        outcome = Runner(run).run()
    assert outcome.verdict == "ok"
    import orjson

    target = orjson.loads(outcome.path.read_bytes())["target"]
    assert target["baseUrls"] == [a.base_url, b.base_url] and "baseUrl" not in target


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ({"baseUrl": "http://a:1/v1", "baseUrls": ["http://b:1/v1"]}, "baseUrl .one server. or baseUrls"),
        ({"baseUrls": ["http://a:1/v1", "http://a:1/v1"]}, "lists a replica twice"),
        ({"baseUrls": ["a:1/v1"]}, r"baseUrls\[0\] must be an http"),
        ({"baseUrls": []}, "at least 1 item"),
    ],
)
def test_bad_replica_lists_are_refused_naming_the_field(tmp_path: Path, target: dict[str, Any], message: str) -> None:
    mapping = spec([], tmp_path / "d.jsonl", tmp_path / "r")
    mapping["target"] = {"model": "m", **target}
    with pytest.raises(SpecError, match=message):
        run_from_mapping(mapping)
