"""`evalsi run --ray` and checkpoint evaluation with ``--ray``: a run's generations scored by a reward pool on the
cluster, as in-process scoring would score them; with ``--ray-shards``, the run generated and scored in shards on
the cluster, as in one process."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.ray import RayShards, RewardPool
from evalsi.runs import Runner, run_from_mapping
from evalsi.runs._curve import step_files
from evalsi.runs._results import journal_path, read_results
from tests.helpers.openai_server import OpenAIServer
from tests.integrations.ray import probe
from tests.integrations.ray._util import PROBE_MODULE, wait_for
from tests.integrations.ray.conftest import Cluster
from tests.runs.conftest import record_dicts, run_spec, write_jsonl
from tests.training.conftest import answers, write_spec

QUESTIONS = {f"{a}+{a}?": str(2 * a) for a in range(12)}


def dataset(tmp_path: Path) -> Path:
    rows = [{"id": f"q{i}", "question": q, "answer": a} for i, (q, a) in enumerate(QUESTIONS.items())]
    return write_jsonl(tmp_path / "qa.jsonl", rows)


def probed(log: Path) -> list[dict[str, Any]]:
    """The probe evaluator (logging where it scores to ``log``), then exact-match."""
    return [{"ref": "ray-probe", "params": {"log": str(log)}}, {"ref": "exact-match"}]


def some_wrong(wrong_every: int) -> dict[str, str]:
    """Every ``wrong_every``-th answer wrong (the first among them), so exact-match has both verdicts."""
    return {q: a if i % wrong_every else a + "0" for i, (q, a) in enumerate(QUESTIONS.items())}


def journaled(path: Path) -> list[dict[str, Any]]:
    """The records of a run's journal so far (its complete lines after the header; none before it exists)."""
    text = path.read_text() if path.exists() else ""
    lines = [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]
    return [line for line in lines if "key" in line]


def scores(path: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    """Each record's key and its samples' completions and scores."""
    return [
        (r["key"], [{"completion": s["completion"], "scores": s["scores"]} for s in r["samples"]])
        for r in read_results(path)["records"]
    ]


def test_a_runs_generations_are_scored_by_the_pools_actors(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "scored.log"
    evaluators = probed(log)
    with OpenAIServer(answers=some_wrong(wrong_every=2), default="?") as server:
        data = dataset(tmp_path)
        run = run_from_mapping(run_spec(server, data, tmp_path / "pool.json", samples=2, evaluators=evaluators))
        local = Runner(
            run_from_mapping(run_spec(server, data, tmp_path / "local.json", samples=2, evaluators=evaluators))
        ).run()
        in_process = {pid for pid, _ in probe.scored(log)}
        with RewardPool(run.reward, num_workers=2, num_cpus=0.25, imports=[PROBE_MODULE], name="run") as pool:
            outcome = Runner(run, scorer=pool).run()
            actors = {a["pid"] for a in pool.where()}
            assert pool.stats()["rollouts"] == 2 * len(QUESTIONS)
    assert in_process == {os.getpid()}
    on_pool = {pid for pid, _ in probe.scored(log)} - in_process
    assert on_pool and on_pool <= actors  # scored in the actors' processes, not here
    assert outcome.verdict == "ok" and outcome.summary.metrics["exact-match"].mean == 0.5
    assert scores(tmp_path / "pool.json") == scores(tmp_path / "local.json")
    assert outcome.summary.to_dict() == local.summary.to_dict()


def test_evalsi_run_with_ray_writes_what_an_in_process_run_writes(cluster: Cluster, tmp_path: Path) -> None:
    with OpenAIServer(answers={q: a for q, a in list(QUESTIONS.items())[:8]}, default="?") as server:
        body = run_spec(server, dataset(tmp_path), tmp_path / "unused.json", samples=2)
        spec = {"apiVersion": "evals.si/v1alpha1", "kind": "RunSpec", "metadata": {"name": "ray-run"}, "spec": body}
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        runner = CliRunner()
        local = runner.invoke(app, ["run", "-f", str(path), "-o", str(tmp_path / "local.json"), "-q"])
        remote = runner.invoke(
            app, ["run", "-f", str(path), "-o", str(tmp_path / "ray.json"), "-q", "--ray", cluster.address]
        )
    assert (local.exit_code, remote.exit_code) == (0, 0), remote.stderr
    assert scores(tmp_path / "ray.json") == scores(tmp_path / "local.json")
    assert read_results(tmp_path / "ray.json")["summary"] == read_results(tmp_path / "local.json")["summary"]


def test_checkpoint_evaluation_with_ray_writes_what_it_writes_in_process(cluster: Cluster, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "specs")
    runner = CliRunner()
    with OpenAIServer(answers=answers(wrong=7), default="?") as server:
        serving = ["--serve", "endpoint", "--base-url", server.base_url, "--model", "served"]
        runs = {
            "local": [],
            "ray": ["--ray", cluster.address, "--ray-workers", "2"],
            "sharded": ["--ray", cluster.address, "--ray-shards", "3"],
        }
        for run, extra in runs.items():
            result = runner.invoke(
                app,
                ["checkpoints", "eval", "org/base", "--step", "base", "-f", str(spec), "--training-run", run,
                 *serving, "--log-dir", str(tmp_path / "logs"), "-q", *extra],
            )  # fmt: skip
            assert result.exit_code == 0, result.stderr
    files = {run: step_files(tmp_path / "logs", run, "forgetting")[None] for run in runs}
    assert scores(files["ray"]) == scores(files["local"])
    assert read_results(files["ray"])["summary"] == read_results(files["local"])["summary"]
    assert read_results(files["ray"])["summary"]["metrics"]["exact-match"]["mean"] == 23 / 30
    assert record_dicts(files["sharded"]) == record_dicts(files["local"])
    assert read_results(files["sharded"])["summary"] == read_results(files["local"])["summary"]


def test_a_sharded_run_writes_what_an_unsharded_run_writes(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "scored.log"
    evaluators = probed(log)
    with OpenAIServer(answers=some_wrong(wrong_every=3), default="?") as server:
        data = dataset(tmp_path)
        local = run_spec(server, data, tmp_path / "local.json", samples=2, evaluators=evaluators)
        Runner(run_from_mapping(local)).run()
        requests = server.request_count()
        run = run_from_mapping(run_spec(server, data, tmp_path / "sharded.json", samples=2, evaluators=evaluators))
        sharded = Runner(run, shards=RayShards(3, num_cpus=0.25, imports=[PROBE_MODULE])).run()
        assert server.request_count() == 2 * requests  # every record generated once more, by the shards
    assert record_dicts(tmp_path / "sharded.json") == record_dicts(tmp_path / "local.json")
    assert read_results(tmp_path / "sharded.json")["summary"] == read_results(tmp_path / "local.json")["summary"]
    assert (sharded.verdict, sharded.generated) == ("ok", len(QUESTIONS))
    scorers = {pid for pid, _ in probe.scored(log)} - {os.getpid()}
    assert len(scorers) == 3  # each shard scored its records in its own actor's process


def test_shards_together_keep_to_the_targets_max_concurrency(cluster: Cluster, tmp_path: Path) -> None:
    with OpenAIServer(answers=QUESTIONS, default="?", delay=0.05) as server:
        target = {"maxConcurrency": 2}
        run = run_from_mapping(run_spec(server, dataset(tmp_path), tmp_path / "out.json", samples=1, target=target))
        server.reset_peak()
        # more shards than the cluster's 4 CPUs: the last wait for the first to finish
        outcome = Runner(run, shards=RayShards(6, num_cpus=1)).run()
        assert outcome.verdict == "ok" and server.request_count() == len(QUESTIONS)
        assert 1 <= server.peak_in_flight <= 2  # six shards, each allowed 2 requests by its own target


def test_an_interrupted_sharded_run_resumes_without_asking_for_done_records(cluster: Cluster, tmp_path: Path) -> None:
    import ray

    with OpenAIServer(answers=QUESTIONS, default="?", delay=0.2) as server:
        run = run_from_mapping(
            run_spec(server, dataset(tmp_path), tmp_path / "out.json", batchSize=1, target={"maxConcurrency": 1})
        )
        journal = journal_path(run.output)

        async def interrupted() -> None:
            task = asyncio.create_task(Runner(run, shards=RayShards(2, num_cpus=0.25)).run_async())
            while not task.done() and len(journaled(journal)) < 3:
                await asyncio.sleep(0.05)
            assert not task.done(), "the run ended before it could be interrupted"
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(interrupted())
        done = {record["prompt"] for record in journaled(journal)}
        assert 3 <= len(done) < len(QUESTIONS)
        before = {q: server.request_count(q) for q in QUESTIONS}
        # the interrupted run's actors are gone: the cluster has its CPUs back
        total = ray.cluster_resources()["CPU"]
        wait_for(lambda: ray.available_resources().get("CPU", 0) >= total, what="the shards' CPUs back")
        outcome = Runner(run, shards=RayShards(2, num_cpus=0.25)).run()
        asked = {q for q in QUESTIONS if server.request_count(q) > before[q]}
    assert outcome.verdict == "ok" and outcome.resumed == len(done)
    assert not asked & done and asked | done == set(QUESTIONS)
    assert len(read_results(run.output)["records"]) == len(QUESTIONS)


def test_evalsi_run_with_ray_shards_writes_what_an_in_process_run_writes(cluster: Cluster, tmp_path: Path) -> None:
    with OpenAIServer(answers={q: a for q, a in list(QUESTIONS.items())[:8]}, default="?") as server:
        body = run_spec(server, dataset(tmp_path), tmp_path / "unused.json", samples=2)
        body["gates"] = [{"metric": "exact-match", "min": 0.9}]
        spec = {"apiVersion": "evals.si/v1alpha1", "kind": "RunSpec", "metadata": {"name": "ray-run"}, "spec": body}
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        runner = CliRunner()
        local = runner.invoke(app, ["run", "-f", str(path), "-o", str(tmp_path / "local.json"), "-q"])
        sharded = runner.invoke(
            app,
            ["run", "-f", str(path), "-o", str(tmp_path / "ray.json"), "-q", "--ray", cluster.address,
             "--ray-shards", "2"],
        )  # fmt: skip
    assert (local.exit_code, sharded.exit_code) == (3, 3), sharded.stderr  # the gate fails in both
    assert record_dicts(tmp_path / "ray.json") == record_dicts(tmp_path / "local.json")
    assert read_results(tmp_path / "ray.json")["summary"] == read_results(tmp_path / "local.json")["summary"]


def dying_model(prompt: str) -> str:
    """Doubles ``a`` in ``a+a?``; the first time it is asked ``5+5?`` it kills its process (once: a marker file)."""
    marker = Path(os.environ["EVALSI_TEST_DYING_MARKER"])
    if prompt == "5+5?" and not marker.exists():
        marker.touch()
        os._exit(1)
    return str(2 * int(prompt.split("+")[0]))


def test_a_lost_shards_records_fail_and_the_rerun_generates_them(cluster: Cluster, tmp_path: Path) -> None:
    spec = run_spec_callable(tmp_path)
    run = run_from_mapping(spec)
    shards = RayShards(2, num_cpus=0.25, runtime_env={"env_vars": {"EVALSI_TEST_DYING_MARKER": str(tmp_path / "died")}})
    first = Runner(run, shards=shards).run()
    assert (tmp_path / "died").exists()
    assert first.verdict == "failed" and "q5" not in {r.id for r in first.records}
    assert all(reason.startswith("shard 1 stopped before this record was done") for reason in first.failed.values())
    assert len(first.records) + len(first.failed) == len(QUESTIONS)
    second = Runner(run, shards=shards).run()
    assert (second.verdict, second.resumed, second.generated) == ("ok", len(first.records), len(first.failed))
    assert second.summary.metrics["exact-match"].mean == 1.0


def run_spec_callable(tmp_path: Path) -> dict[str, Any]:
    """A run of the dying model over the questions, one record per scoring batch."""
    return {
        "target": {"callable": "tests.integrations.ray.test_runs:dying_model", "maxConcurrency": 1},
        "dataset": {"path": str(dataset(tmp_path)), "fields": {"prompt": "question"}},
        "evaluators": [{"ref": "exact-match"}],
        "batchSize": 1,
        "output": str(tmp_path / "out.json"),
    }
