"""Sharded runs without Ray: records dealt to shards, shard reports merged as they arrive, and the driver's results.

The shards here run in this process (:class:`LocalShards`, the same :func:`evalsi.runs.run_shard` and report
merging that ``evalsi.ray.RayShards`` runs in its actors), so the results file, resuming and lost shards are
checked against a run without shards.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest

from evalsi.ray._runs import merge_reports, run_document, target_limits
from evalsi.runs import BoundRun, Runner, Shard, ShardReport, run_from_mapping, run_shard
from evalsi.runs._datasets import Item
from evalsi.runs._results import read_results
from evalsi.runs._sharding import cut_shards
from evalsi.runs._targets import Generation, ModelFn
from evalsi.specs import TargetSpec
from tests.helpers.openai_server import OpenAIServer
from tests.runs.conftest import record_dicts, run_spec, write_jsonl
from tests.runs.test_run import Picky

QUESTIONS = {f"{a}+{a}?": str(2 * a) for a in range(11)}


class LocalShards:
    """Shards run concurrently in this process; ``lose`` names shards whose stream fails after its first report."""

    def __init__(self, count: int, lose: Sequence[int] = ()) -> None:
        self._count = count
        self.lose = set(lose)
        self.shards: list[Shard] = []

    @property
    def count(self) -> int:
        return self._count

    async def run_shards(
        self, run: BoundRun, shards: Sequence[Shard], generated_by: str, fn: ModelFn | None
    ) -> AsyncGenerator[ShardReport, None]:
        self.shards = list(shards)
        streams = [self._stream(run, shard, generated_by, fn) for shard in shards]
        async for report in merge_reports(shards, streams):
            yield report

    async def _stream(
        self, run: BoundRun, shard: Shard, generated_by: str, fn: ModelFn | None
    ) -> AsyncIterator[ShardReport]:
        async with contextlib.aclosing(run_shard(run, shard, generated_by, fn)) as reports:
            async for report in reports:
                yield report
                if shard.number in self.lose:
                    raise ConnectionError("the node went away\nmore detail")


def items(count: int) -> list[Item]:
    return [Item(f"k{i}", i, f"p{i}") for i in range(count)]


def test_records_are_dealt_to_the_shards_in_turn_and_keep_their_order() -> None:
    todo = items(7)
    rescore = [(Item("r0", 7, "p7"), [Generation("x")]), (Item("r1", 8, "p8"), [Generation("y")])]
    shards = cut_shards(todo, rescore, 3)
    assert [s.number for s in shards] == [0, 1, 2]
    assert [[i.key for i in s.items] for s in shards] == [["k0", "k3", "k6"], ["k1", "k4"], ["k2", "k5"]]
    assert [[i.key for i, _ in s.rescore] for s in shards] == [[], ["r0"], ["r1"]]
    assert sorted(k for s in shards for k in s.keys) == sorted([*(i.key for i in todo), "r0", "r1"])


def test_no_shard_is_empty_and_the_count_must_be_positive() -> None:
    assert [len(s.items) for s in cut_shards(items(2), [], 5)] == [1, 1]
    assert cut_shards([], [], 4) == []
    with pytest.raises(ValueError, match="at least 1"):
        cut_shards(items(2), [], 0)


def test_the_targets_concurrency_is_split_between_its_replicas() -> None:
    one = TargetSpec.model_validate({"baseUrl": "http://a:1/v1", "model": "m", "maxConcurrency": 6})
    assert {url: limit.max_concurrency for url, limit in target_limits(one).items()} == {"http://a:1/v1": 6}
    three = TargetSpec.model_validate({"baseUrls": ["http://a:1", "http://b:1", "http://c:1"], "model": "m",
                                       "maxConcurrency": 7})  # fmt: skip
    assert [limit.max_concurrency for limit in target_limits(three).values()] == [3, 2, 2]
    few = TargetSpec.model_validate({"baseUrls": ["http://a:1", "http://b:1"], "model": "m", "maxConcurrency": 1})
    assert [limit.max_concurrency for limit in target_limits(few).values()] == [1, 1]
    assert target_limits(TargetSpec.model_validate({"callable": "os.path:basename"})) == {}


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    # every third answer wrong, so exact-match has both verdicts
    answers = {q: a if i % 3 else a + "0" for i, (q, a) in enumerate(QUESTIONS.items())}
    with OpenAIServer(answers=answers, default="?") as srv:
        yield srv


def qa(tmp_path: Path) -> Path:
    rows = [{"id": f"q{i}", "question": q, "answer": a} for i, (q, a) in enumerate(QUESTIONS.items())]
    return write_jsonl(tmp_path / "qa.jsonl", rows)


def test_the_run_binds_again_from_its_document(server: OpenAIServer, tmp_path: Path) -> None:
    run = run_from_mapping(run_spec(server, qa(tmp_path), tmp_path / "out.json", samples=2))
    again = run_from_mapping(run_document(run), None, run.base_dir)
    assert again.body == run.body and again.spec.name == run.spec.name
    assert again.reward.component_names == run.reward.component_names


def test_a_sharded_run_writes_what_a_run_without_shards_writes(server: OpenAIServer, tmp_path: Path) -> None:
    data = qa(tmp_path)
    plain = Runner(run_from_mapping(run_spec(server, data, tmp_path / "plain.json", samples=2))).run()
    shards = LocalShards(3)
    run = run_from_mapping(run_spec(server, data, tmp_path / "sharded.json", samples=2))
    sharded = Runner(run, shards=shards).run()
    assert len(shards.shards) == 3
    assert record_dicts(tmp_path / "sharded.json") == record_dicts(tmp_path / "plain.json")
    assert [r["index"] for r in record_dicts(tmp_path / "sharded.json")] == list(range(len(QUESTIONS)))
    assert sharded.summary.to_dict() == plain.summary.to_dict()
    assert (sharded.verdict, sharded.generated, sharded.resumed) == ("ok", len(QUESTIONS), 0)
    assert read_results(tmp_path / "sharded.json")["status"] == "complete"
    assert not (tmp_path / "sharded.json.journal").exists()


def test_a_lost_shards_records_fail_and_a_rerun_generates_only_them(server: OpenAIServer, tmp_path: Path) -> None:
    run = run_from_mapping(run_spec(server, qa(tmp_path), tmp_path / "out.json", batchSize=1))
    first = Runner(run, shards=LocalShards(2, lose=[1])).run()
    lost = set(first.failed)
    done = {r.key for r in first.records}
    assert first.verdict == "failed" and lost and done and not lost & done
    assert len(lost) + len(done) == len(QUESTIONS)
    reason = next(iter(first.failed.values()))
    assert reason.startswith("shard 1 stopped before this record was done: ConnectionError: the node went away")
    before = {q: server.request_count(q) for q in QUESTIONS}
    second = Runner(run, shards=LocalShards(2)).run()
    again = {q for q in QUESTIONS if server.request_count(q) > before[q]}
    prompts = {r.key: r.prompt for r in second.records}
    assert again == {prompts[key] for key in lost}  # what was done is never asked for again
    assert (second.verdict, second.resumed, second.generated) == ("ok", len(done), len(lost))


def test_closing_the_merged_reports_stops_every_stream() -> None:
    started: list[int] = []
    stopped: list[int] = []

    async def stream(number: int) -> AsyncIterator[ShardReport]:
        started.append(number)
        try:
            yield ShardReport(number)
            await asyncio.Event().wait()  # a shard still working
            yield ShardReport(number)
        finally:
            stopped.append(number)

    async def first_report() -> ShardReport:
        shards = [Shard(0), Shard(1)]
        merged = merge_reports(shards, [stream(0), stream(1)])
        try:
            return await anext(merged)
        finally:
            await merged.aclose()

    report = asyncio.run(first_report())
    assert report.shard in (0, 1)
    assert sorted(stopped) == sorted(started)


def test_shards_take_no_target_or_scorer_of_the_caller(server: OpenAIServer, tmp_path: Path) -> None:
    run = run_from_mapping(run_spec(server, qa(tmp_path), tmp_path / "out.json"))
    with pytest.raises(ValueError, match="no target or scorer"):
        Runner(run, scorer=run.reward, shards=LocalShards(2))


def test_an_errored_score_under_raise_stops_every_shard(tmp_path: Path) -> None:
    assert Picky.name == "test-picky"  # registered on import
    answers = {q: "no idea" if i == 4 else a for i, (q, a) in enumerate(QUESTIONS.items())}
    with OpenAIServer(answers=answers, default="?") as srv:
        spec = run_spec(srv, qa(tmp_path), tmp_path / "out.json", evaluators=[{"ref": "test-picky"}], batchSize=1)
        spec["onError"] = "raise"
        first = Runner(run_from_mapping(spec), shards=LocalShards(3)).run()
        assert first.verdict == "failed" and first.aborted is not None
        assert "(index 4): test-picky errored: cannot judge" in first.aborted
        assert "q4" not in {r.id for r in first.records}
        assert read_results(tmp_path / "out.json")["status"] == "partial"
        spec["onError"] = "zero"
        second = Runner(run_from_mapping(spec), shards=LocalShards(3)).run()
    assert second.verdict == "ok" and second.resumed == len(first.records)
    assert [r.id for r in second.records] == [f"q{i}" for i in range(len(QUESTIONS))]
