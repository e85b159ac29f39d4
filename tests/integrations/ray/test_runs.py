"""`evalsi run --ray` and checkpoint evaluation with ``--ray``: a run's generations scored by a reward pool on the
cluster, as in-process scoring would score them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.ray import RewardPool
from evalsi.runs import Runner, run_from_mapping
from evalsi.runs._curve import step_files
from evalsi.runs._results import read_results
from tests.helpers.openai_server import OpenAIServer
from tests.integrations.ray import probe
from tests.integrations.ray._util import PROBE_MODULE
from tests.integrations.ray.conftest import Cluster
from tests.runs.conftest import run_spec, write_jsonl
from tests.training.conftest import answers, write_spec

QUESTIONS = {f"{a}+{a}?": str(2 * a) for a in range(12)}


def dataset(tmp_path: Path) -> Path:
    rows = [{"id": f"q{i}", "question": q, "answer": a} for i, (q, a) in enumerate(QUESTIONS.items())]
    return write_jsonl(tmp_path / "qa.jsonl", rows)


def scores(path: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    """Each record's key and its samples' completions and scores."""
    return [
        (r["key"], [{"completion": s["completion"], "scores": s["scores"]} for s in r["samples"]])
        for r in read_results(path)["records"]
    ]


def test_a_runs_generations_are_scored_by_the_pools_actors(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "scored.log"
    evaluators = [{"ref": "ray-probe", "params": {"log": str(log)}}, {"ref": "exact-match"}]
    # every other answer wrong, so exact-match has both verdicts
    answers = {q: a if i % 2 else a + "0" for i, (q, a) in enumerate(QUESTIONS.items())}
    with OpenAIServer(answers=answers, default="?") as server:
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
        for run, extra in (("local", []), ("ray", ["--ray", cluster.address, "--ray-workers", "2"])):
            result = runner.invoke(
                app,
                ["checkpoints", "eval", "org/base", "--step", "base", "-f", str(spec), "--training-run", run,
                 *serving, "--log-dir", str(tmp_path / "logs"), "-q", *extra],
            )  # fmt: skip
            assert result.exit_code == 0, result.stderr
    files = {run: step_files(tmp_path / "logs", run, "forgetting")[None] for run in ("local", "ray")}
    assert scores(files["ray"]) == scores(files["local"])
    assert read_results(files["ray"])["summary"] == read_results(files["local"])["summary"]
    assert read_results(files["ray"])["summary"]["metrics"]["exact-match"]["mean"] == 23 / 30
