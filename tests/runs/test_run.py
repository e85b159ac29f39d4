"""Runs end to end against the loopback OpenAI-compatible server: metrics, pass@k, gates, failures, resume."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest

from evalsi.errors import DataError
from evalsi.evaluators import Evaluator, NoParams, Score, ScoreContext, register
from evalsi.records import Record
from evalsi.rewards import from_mapping
from evalsi.runs import ResumeError, Runner, RunOutcome, run_from_mapping
from evalsi.runs._results import journal_path, read_results
from tests.helpers.openai_server import OpenAIServer
from tests.runs.conftest import run_spec, write_jsonl


@register
class Picky(Evaluator[NoParams]):
    """Errors on answers it cannot judge ("no idea"), passes anything else that equals the reference."""

    name = "test-picky"
    summary = "test evaluator that errors on 'no idea'"
    reads: ClassVar[tuple[str, ...]] = ("completion", "reference")

    def score(self, record: Record, params: NoParams, ctx: ScoreContext) -> Score:
        if record.completion_text == "no idea":
            return Score.error("cannot judge")
        return Score.ok(record.completion_text == record.reference)


OUTAGE = {"on": False}


@register
class Outage(Evaluator[NoParams]):
    """Exact match, except that it errors for every record while ``OUTAGE["on"]`` is set."""

    name = "test-outage"
    summary = "test evaluator with a switchable outage"
    reads: ClassVar[tuple[str, ...]] = ("completion", "reference")

    def score(self, record: Record, params: NoParams, ctx: ScoreContext) -> Score:
        if OUTAGE["on"]:
            return Score.error("scorer unavailable")
        return Score.ok(record.completion_text == record.reference)


def start(spec: dict[str, Any], **kwargs: Any) -> Any:
    return Runner(run_from_mapping(spec), **kwargs).run()


def test_the_outcome_is_never_formatted_on_the_way_out(
    server: OpenAIServer, qa_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncio formats its main task (result included) when it puts the Ctrl-C handler back: not the outcome."""
    assert threading.current_thread() is threading.main_thread()
    formatted: list[int] = []

    def counted(self: RunOutcome) -> str:
        formatted.append(1)
        return "RunOutcome(...)"

    monkeypatch.setattr(RunOutcome, "__repr__", counted)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # asyncio sets its own only over this one
    try:
        outcome = start(run_spec(server, qa_file, tmp_path / "r.json"))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert outcome.verdict == "ok" and outcome.generated == 4
    assert formatted == []


def test_metrics_pass_k_and_the_results_file(server: OpenAIServer, qa_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    spec = run_spec(
        server,
        qa_file,
        out,
        samples=2,
        passK={"atK": {"metrics": ["exact-match"], "k": [1, 2]}, "powK": {"metrics": ["exact-match"], "k": [2]}},
    )
    outcome = start(spec)
    m = outcome.summary.metrics
    # a: 4,4 -> 1,1   b: 6,7 -> 1,0   c: Paris -> 1,1   d: no idea -> 0,0
    assert m["exact-match"].mean == pytest.approx(5 / 8)
    assert (m["exact-match"].n, m["exact-match"].clusters) == (8, 4)
    assert m["pass@1/exact-match"].mean == pytest.approx(0.625)
    assert m["pass@2/exact-match"].mean == pytest.approx(0.75)
    assert m["pass^2/exact-match"].mean == pytest.approx(0.5)
    assert outcome.verdict == "ok" and outcome.generated == 4 and outcome.resumed == 0
    data = read_results(out)
    assert data["status"] == "complete" and data["name"] == "run"
    assert data["target"] == {
        "kind": "openai",
        "baseUrl": server.base_url,
        "model": "test-model",
        "api": "chat",
        "apiKeyEnv": None,
    }
    assert data["spec"]["samples"] == 2 and data["timings"]["wallSeconds"] >= 0
    assert [r["id"] for r in data["records"]] == ["a", "b", "c", "d"]
    b = data["records"][1]
    assert [s["completion"] for s in b["samples"]] == ["6", "7"]
    assert [s["scores"]["exact-match"]["value"] for s in b["samples"]] == [True, False]
    assert data["summary"]["metrics"]["pass@2/exact-match"]["mean"] == pytest.approx(0.75)
    assert not journal_path(out).exists()


def test_gates_fail_with_exit_3(server: OpenAIServer, qa_file: Path, tmp_path: Path) -> None:
    gates = [{"metric": "exact-match", "min": 0.9}, {"metric": "exact-match", "max": 1.0}]
    outcome = start(run_spec(server, qa_file, tmp_path / "r.json", gates=gates))
    assert outcome.verdict == "gate failed"
    assert [g.passed for g in outcome.summary.gates] == [False, True]
    assert outcome.summary.gates[0].reason == "0.7500 < min 0.9"


def test_transient_errors_are_retried_within_the_run(server: OpenAIServer, qa_file: Path, tmp_path: Path) -> None:
    server.inject(status=429, times=3)
    server.inject(status=502, times=2)
    outcome = start(run_spec(server, qa_file, tmp_path / "r.json"))
    assert outcome.verdict == "ok" and len(outcome.records) == 4
    assert server.statuses.count(429) == 3 and server.statuses.count(502) == 2


def test_a_failed_record_is_retried_on_the_next_run_only(server: OpenAIServer, qa_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    spec = run_spec(server, qa_file, out)
    server.inject(status=400, prompt="capital of France?")
    first = start(spec)
    assert first.verdict == "failed" and list(first.failed) == ["c"] and "HTTP 400" in first.failed["c"]
    data = read_results(out)
    assert data["status"] == "partial" and [r["id"] for r in data["records"]] == ["a", "b", "d"]
    before = {p: server.request_count(p) for p in ("2+2?", "3+3?", "capital of France?", "largest planet?")}
    second = start(spec)
    assert second.verdict == "ok" and second.resumed == 3 and second.generated == 1
    after = {p: server.request_count(p) for p in before}
    assert after == {**before, "capital of France?": before["capital of France?"] + 1}
    assert read_results(out)["status"] == "complete"


def test_changed_evaluators_rescore_without_generating(server: OpenAIServer, qa_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    start(run_spec(server, qa_file, out))
    requests = server.request_count()
    spec = run_spec(server, qa_file, out, evaluators=[{"ref": "contains", "params": {"ignore_case": True}}])
    outcome = start(spec)
    assert server.request_count() == requests
    assert outcome.summary.metrics["contains"].mean == pytest.approx(0.75)
    assert list(read_results(out)["records"][0]["samples"][0]["scores"]) == ["contains"]


def test_other_generation_settings_refuse_to_resume(server: OpenAIServer, qa_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    start(run_spec(server, qa_file, out))
    changed = run_spec(server, qa_file, out, sampling={"temperature": 1.0})
    with pytest.raises(ResumeError, match="different generation settings"):
        start(changed)
    requests = server.request_count()
    assert start(changed, restart=True).generated == 4
    assert server.request_count() == requests + 4


@pytest.mark.parametrize(
    ("on_error", "mean", "verdict"), [("zero", 0.75, "ok"), ("none", 1.0, "ok"), ("raise", None, "failed")]
)
def test_on_error_policy(
    server: OpenAIServer, qa_file: Path, tmp_path: Path, on_error: str, mean: float | None, verdict: str
) -> None:
    spec = run_spec(
        server,
        qa_file,
        tmp_path / "r.json",
        evaluators=[{"ref": "test-picky"}],
        onError=on_error,
        target={"maxConcurrency": 1},
        batchSize=1,
    )
    outcome = start(spec)
    assert outcome.verdict == verdict
    if mean is not None:
        assert outcome.summary.metrics["test-picky"].mean == pytest.approx(mean)
        assert outcome.summary.counts["test-picky"]["error"] == 1
    else:
        assert outcome.aborted is not None and "test-picky errored: cannot judge" in outcome.aborted
        assert read_results(tmp_path / "r.json")["status"] == "partial"


def test_errored_scores_are_rescored_on_resume_not_regenerated(
    server: OpenAIServer, qa_file: Path, tmp_path: Path
) -> None:
    spec = run_spec(server, qa_file, tmp_path / "r.json", evaluators=[{"ref": "test-outage"}])
    OUTAGE["on"] = True
    try:
        first = start(spec)
    finally:
        OUTAGE["on"] = False
    assert first.summary.metrics["test-outage"].mean == 0.0 and first.summary.counts["test-outage"]["error"] == 4
    requests = server.request_count()
    second = start(spec)
    assert server.request_count() == requests  # completions kept, only the scores were redone
    assert second.summary.metrics["test-outage"].mean == pytest.approx(0.75)
    assert second.summary.counts["test-outage"]["error"] == 0


def test_raise_keeps_the_errored_record_unfinished(server: OpenAIServer, qa_file: Path, tmp_path: Path) -> None:
    spec = run_spec(
        server,
        qa_file,
        tmp_path / "r.json",
        evaluators=[{"ref": "test-picky"}],
        onError="raise",
        target={"maxConcurrency": 1},
        batchSize=1,
    )
    first = start(spec)
    assert first.verdict == "failed" and "d" not in {r.id for r in first.records}
    spec["onError"] = "zero"  # the policy is not a generation setting: the run resumes
    second = start(spec)
    assert second.verdict == "ok" and second.resumed == len(first.records)
    assert [r.id for r in second.records] == ["a", "b", "c", "d"]


def echo_model(prompt: str) -> str:
    """An in-process model for the callable target: answers arithmetic by evaluating it."""
    return str(eval(prompt.rstrip("?"))) if prompt[0].isdigit() else "Paris"


def test_callable_target_from_the_spec_and_a_record_limit(qa_file: Path, tmp_path: Path) -> None:
    spec = {
        "target": {"callable": "tests.runs.test_run:echo_model"},
        "dataset": {"path": str(qa_file), "fields": {"prompt": "question"}},
        "evaluators": [{"ref": "exact-match"}],
        "numSamples": 3,
        "output": str(tmp_path / "r.json"),
    }
    outcome = start(spec)
    assert [r.id for r in outcome.records] == ["a", "b", "c"]
    assert outcome.summary.metrics["exact-match"].mean == 1.0
    assert read_results(tmp_path / "r.json")["target"] == {
        "kind": "callable",
        "callable": "tests.runs.test_run:echo_model",
    }


def test_a_truncated_journal_line_is_redone(server: OpenAIServer, qa_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    spec = run_spec(server, qa_file, out)
    start(spec)
    data = read_results(out)
    journal = journal_path(out)
    lines = [orjson.dumps({"fingerprints": data["fingerprints"]})]
    lines += [orjson.dumps(r) for r in data["records"][:2]]
    journal.write_bytes(b"\n".join(lines) + b"\n" + orjson.dumps(data["records"][2])[:40])
    out.unlink()  # as if killed before the first results file was written
    requests = server.request_count()
    outcome = start(spec)
    assert outcome.resumed == 2 and outcome.generated == 2
    assert server.request_count() == requests + 2
    assert [r.id for r in outcome.records] == ["a", "b", "c", "d"] and not journal.exists()


def test_a_missing_reference_column_fails_before_generating(
    server: OpenAIServer, qa_file: Path, tmp_path: Path
) -> None:
    fields = {"prompt": "question", "reference": "gold"}
    spec = run_spec(server, qa_file, tmp_path / "r.json", dataset={"fields": fields})
    with pytest.raises(
        DataError,
        match=r"qa\.jsonl: dataset\.fields\.reference names column 'gold', which no row "
        r"has \(columns: answer, id, question\)",
    ):
        start(spec)
    assert server.request_count() == 0


def test_an_all_skipped_metric_says_why(server: OpenAIServer, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "q.jsonl", [{"id": "a", "question": "2+2?"}, {"id": "b", "question": "3+3?"}])
    outcome = start(run_spec(server, data, tmp_path / "r.json"))
    assert outcome.summary.counts["exact-match"]["skipped"] == 2
    reason = outcome.summary.unscored["exact-match"]
    assert reason.startswith("skipped: ") and "reference" in reason
    assert read_results(tmp_path / "r.json")["summary"]["unscored"] == {"exact-match": reason}


@pytest.mark.parametrize("with_ids", [True, False])
def test_a_new_reference_column_rescores_without_generating(
    server: OpenAIServer, tmp_path: Path, with_ids: bool
) -> None:
    rows = [
        {"id": "a", "question": "2+2?", "answer": "5", "gold": "4"},
        {"id": "c", "question": "capital of France?", "answer": "Lyon", "gold": "Paris"},
    ]
    data = write_jsonl(
        tmp_path / "q.jsonl", [r if with_ids else {k: v for k, v in r.items() if k != "id"} for r in rows]
    )
    out = tmp_path / "r.json"
    first = start(run_spec(server, data, out))
    assert first.summary.metrics["exact-match"].mean == 0.0
    requests = server.request_count()
    again = start(run_spec(server, data, out, dataset={"fields": {"prompt": "question", "reference": "gold"}}))
    assert server.request_count() == requests and again.generated == 0
    assert again.summary.metrics["exact-match"].mean == 1.0
    assert [r["reference"] for r in read_results(out)["records"]] == ["4", "Paris"]
    templated = run_spec(
        server,
        data,
        out,
        dataset={"fields": {"prompt": "question", "reference": "gold"}, "promptTemplate": "{question} ({gold}?)"},
    )
    with pytest.raises(ResumeError, match="different generation settings"):
        start(templated)  # the prompts changed: the completions no longer answer them


def test_another_server_behind_the_same_model_name_never_lends_records(
    server: OpenAIServer, qa_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.json"
    server.inject(status=400, prompt="largest planet?")
    assert start(run_spec(server, qa_file, out)).verdict == "failed"  # partial: three records from this server
    with OpenAIServer(answers={"2+2?": "5"}, default="other") as other:
        moved = run_spec(other, qa_file, out)
        with pytest.raises(ResumeError, match=r"different generation settings \(different target\)"):
            start(moved)
        assert other.request_count() == 0 and read_results(out)["status"] == "partial"  # nothing touched
        outcome = start(moved, restart=True)
    assert outcome.generated == 4 and outcome.resumed == 0
    assert {s.completion for r in outcome.records for s in r.samples} == {"5", "other"}


def test_a_served_model_resumes_on_a_new_port_but_not_with_other_weights(
    qa_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "r.json"
    with OpenAIServer(answers={"2+2?": "4"}, default="old") as first:
        first.inject(status=400, prompt="largest planet?")
        partial = start(run_spec(first, qa_file, out), model={"weights": "aaa"}, replace_stale=True)
    assert partial.verdict == "failed" and len(partial.records) == 3
    generated_by = {r["generatedBy"] for r in read_results(out)["records"]}
    assert len(generated_by) == 1 and None not in generated_by
    with OpenAIServer(answers={"2+2?": "4"}, default="old") as same:  # the same weights served on another port
        resumed = start(run_spec(same, qa_file, out), model={"weights": "aaa"}, replace_stale=True)
        assert same.request_count() == 1
    assert resumed.resumed == 3 and resumed.generated == 1 and read_results(out)["status"] == "complete"
    caplog.clear()
    with caplog.at_level("WARNING", logger="evalsi.runs"), OpenAIServer(default="new") as swapped:
        outcome = start(run_spec(swapped, qa_file, out), model={"weights": "bbb"}, replace_stale=True)
        assert swapped.request_count() == 4
    assert outcome.resumed == 0 and outcome.generated == 4
    assert "4 earlier records were generated with different generation settings (different model)" in caplog.text
    data = read_results(out)
    assert data["status"] == "complete" and data["model"] == {"weights": "bbb"}
    assert {s["completion"] for r in data["records"] for s in r["samples"]} == {"new"}
    assert {r["generatedBy"] for r in data["records"]} == {data["fingerprints"]["generation"]}


def test_only_the_records_generated_otherwise_are_generated_again(
    server: OpenAIServer, qa_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.json"
    spec = run_spec(server, qa_file, out)
    start(spec)
    data = read_results(out)
    data["records"][1]["generatedBy"] = "0123456789abcdef"  # one record came from something else
    out.write_bytes(orjson.dumps(data))
    with pytest.raises(ResumeError, match="different generation settings"):
        start(spec)
    requests = server.request_count()
    outcome = start(spec, replace_stale=True)
    assert outcome.resumed == 3 and outcome.generated == 1
    assert server.request_count() == requests + 1 and server.requests[-1]["messages"][-1]["content"] == "3+3?"
    assert len({r["generatedBy"] for r in read_results(out)["records"]}) == 1


def test_a_sampling_change_names_what_differs(server: OpenAIServer, qa_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    start(run_spec(server, qa_file, out))
    with pytest.raises(ResumeError, match=r"\(different sampling\); use --restart"):
        start(run_spec(server, qa_file, out, sampling={"topP": 0.5}))


def test_a_given_scorer_scores_the_generations(server: OpenAIServer, qa_file: Path, tmp_path: Path) -> None:
    spec = run_spec(server, qa_file, tmp_path / "r.json")
    own = start(spec)
    assert (own.summary.counts["exact-match"]["ok"], own.summary.counts["exact-match"]["error"]) == (4, 0)
    # the same component name, scored by another evaluator: it errors on "no idea" (record d)
    scorer = from_mapping({"components": [{"ref": "test-picky", "name": "exact-match"}]})
    given = start(spec, scorer=scorer, restart=True)
    assert (given.summary.counts["exact-match"]["ok"], given.summary.counts["exact-match"]["error"]) == (3, 1)
    data = read_results(tmp_path / "r.json")
    reasons = [s["scores"]["exact-match"].get("reason") for r in data["records"] for s in r["samples"]]
    assert reasons.count("cannot judge") == 1
