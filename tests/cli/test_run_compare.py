"""`evalsi run` and `evalsi compare` through Typer: exit codes, overrides, summaries, paired comparisons."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
import yaml
from typer.testing import CliRunner

from evalsi.cli.compare import compare_command
from evalsi.cli.run import run_command
from tests.cli._questions import questions, write_questions
from tests.helpers.openai_server import OpenAIServer

app = typer.Typer()
app.command("run")(run_command)
app.command("compare")(compare_command)
runner = CliRunner()

QUESTIONS = questions(30)


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(answers=dict(QUESTIONS), default="?") as srv:
        yield srv


@pytest.fixture
def spec_file(tmp_path: Path, server: OpenAIServer) -> Path:
    write_questions(tmp_path / "d.jsonl", QUESTIONS)
    spec: dict[str, Any] = {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RunSpec",
        "metadata": {"name": "cli"},
        "spec": {
            "target": {"baseUrl": server.base_url, "model": "base", "retryBackoff": 0.01},
            "dataset": {"path": "d.jsonl"},
            "evaluators": [{"ref": "exact-match"}],
            "gates": [{"metric": "exact-match", "min": 0.5}],
        },
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args))


def test_run_writes_results_and_summarises(spec_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    result = invoke("run", "-f", str(spec_file), "-o", str(out), "-q")
    assert result.exit_code == 0, result.output
    assert "exact-match" in result.output and "1.0000" in result.output and "passed" in result.output
    assert orjson.loads(out.read_bytes())["status"] == "complete"


def test_run_shows_progress_with_rate(spec_file: Path, tmp_path: Path) -> None:
    result = invoke("run", "-f", str(spec_file), "-o", str(tmp_path / "p.json"))
    assert result.exit_code == 0, result.output
    assert "30/30" in result.output and "rec/s" in result.output


def test_run_gate_failure_exits_3_with_a_table(spec_file: Path, server: OpenAIServer, tmp_path: Path) -> None:
    server.answers = {p: "wrong" for p in QUESTIONS}
    result = invoke("run", "-f", str(spec_file), "--set", f"output={tmp_path / 'b.json'}", "-q")
    assert result.exit_code == 3, result.output
    assert "FAILED" in result.output and "0.0000 < min 0.5" in result.output


def test_run_overrides_reach_the_requests(spec_file: Path, server: OpenAIServer, tmp_path: Path) -> None:
    result = invoke(
        "run",
        "-f",
        str(spec_file),
        "-o",
        str(tmp_path / "c.json"),
        "-q",
        "--set",
        "target.model=step-100",
        "--set",
        "sampling.temperature=0.6",
        "--set",
        "numSamples=5",
    )
    assert result.exit_code == 0, result.output
    assert len(server.requests) == 5
    assert {(r["model"], r["temperature"]) for r in server.requests} == {("step-100", 0.6)}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "sampling.temperature=hot"], "spec.sampling.temperature"),
        (["--set", "dataset.path=missing.jsonl"], "no such file"),
        (["--set", "evaluators[0].ref=nope"], "unknown evaluator 'nope'"),
    ],
)
def test_run_bad_input_exits_2(spec_file: Path, tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke("run", "-f", str(spec_file), "-o", str(tmp_path / "x.json"), "-q", *args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


def test_run_with_failed_records_exits_1(spec_file: Path, server: OpenAIServer, tmp_path: Path) -> None:
    server.inject(status=401, prompt="q3")
    result = invoke("run", "-f", str(spec_file), "-o", str(tmp_path / "x.json"), "-q")
    assert result.exit_code == 1
    assert "1 records could not be generated" in " ".join(result.output.split())


def test_compare_marks_significant_changes_and_lists_flips(
    spec_file: Path, server: OpenAIServer, tmp_path: Path
) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert invoke("run", "-f", str(spec_file), "-o", str(a), "-q").exit_code == 0
    server.answers = {p: (ans if i < 10 else "wrong") for i, (p, ans) in enumerate(QUESTIONS.items())}
    assert invoke("run", "-f", str(spec_file), "-o", str(b), "-q").exit_code == 3
    result = invoke("compare", str(a), str(b), "--flips", "3")
    assert result.exit_code == 0, result.output
    text = result.output
    assert "-0.6667*" in text and "+0/−20" in text and "r10 (−)" in text and "17 more" in text
    data = orjson.loads(invoke("compare", str(a), str(b), "--json").output)
    assert data[0]["metric"] == "exact-match" and data[0]["significant"] is True
    assert data[0]["mcnemar"]["aOnly"] == 20 and data[0]["mcnemar"]["pValue"] < 1e-5
    same = invoke("compare", str(a), str(a), "--json")
    assert orjson.loads(same.output)[0]["significant"] is False


def test_compare_names_files_and_marks_only_what_it_uses(spec_file: Path, server: OpenAIServer, tmp_path: Path) -> None:
    a = tmp_path / "a.json"
    assert invoke("run", "-f", str(spec_file), "-o", str(a), "-q").exit_code == 0
    result = runner.invoke(app, ["compare", str(a), str(a)], terminal_width=200)
    assert result.exit_code == 0
    assert f"B=cli({a})vsA=cli({a})" in "".join(result.stdout.split())  # a long path folds at the table's width
    assert "*" not in result.stdout and "excludes 0" not in result.stdout  # no significant change, no footnote
    assert "warning" not in result.stderr


def test_compare_warns_on_few_shared_records_and_partial_runs(
    spec_file: Path, server: OpenAIServer, tmp_path: Path
) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert invoke("run", "-f", str(spec_file), "-o", str(a), "-q").exit_code == 0
    server.inject(status=401, prompt="q3")
    assert invoke("run", "-f", str(spec_file), "-o", str(b), "-q", "--set", "numSamples=20").exit_code == 1
    result = runner.invoke(app, ["compare", str(a), str(b)], terminal_width=200)
    assert result.exit_code == 0, result.output
    err = " ".join(result.stderr.split())
    assert "warning: the runs share 19 records (63% of the larger run; 11 only in A, 0 only in B)" in err
    assert f"warning: B ({b}) is a partial run (19 records)" in err
    assert "exact-match: 19 pairs; 11 records only in A, 0 only in B are left out" in " ".join(result.stdout.split())
    strict = runner.invoke(app, ["compare", str(a), str(b), "--strict"], terminal_width=200)
    assert strict.exit_code == 2 and "error: --strict" in strict.stderr
    assert runner.invoke(app, ["compare", str(a), str(a), "--strict"]).exit_code == 0


def test_compare_bad_input_exits_2(tmp_path: Path, spec_file: Path) -> None:
    a = tmp_path / "a.json"
    assert invoke("run", "-f", str(spec_file), "-o", str(a), "-q").exit_code == 0
    missing = invoke("compare", str(a), str(tmp_path / "none.json"))
    assert missing.exit_code == 2 and "no such results file" in missing.output
    unknown = invoke("compare", str(a), str(a), "-m", "pass@4/exact-match")
    assert unknown.exit_code == 2 and "has no metric 'pass@4/exact-match'" in " ".join(unknown.output.split())


def test_an_all_skipped_metric_shows_its_reason_in_the_summary(spec_file: Path, tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_bytes(
        b"".join(orjson.dumps({"id": f"r{i}", "prompt": p}) + b"\n" for i, p in enumerate(QUESTIONS))
    )
    result = invoke("run", "-f", str(spec_file), "-o", str(tmp_path / "a.json"), "-q")
    assert result.exit_code == 3
    assert "exact-match: nothing was scored; skipped: " in result.output and "reference" in result.output


def test_paths_in_the_spec_are_relative_to_it_and_paths_typed_here_to_the_current_directory(
    spec_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert invoke("run", "-f", str(spec_file), "-q", "-o", "mine.json").exit_code == 0
    assert (elsewhere / "mine.json").exists()
    # --set is typed on the command line: its paths are the working directory's, like -o's
    write_questions(elsewhere / "local.jsonl", questions(3))
    result = invoke(
        "run", "-f", str(spec_file), "-q", "--set", "output=runs/typed.json", "--set", "dataset.path=local.jsonl"
    )
    assert result.exit_code == 0, result.output
    typed = orjson.loads((elsewhere / "runs" / "typed.json").read_bytes())
    assert len(typed["records"]) == 3 and not (tmp_path / "runs").exists()
    # written in the spec: relative to the spec file, wherever evalsi was started
    spec = yaml.safe_load(spec_file.read_text())
    spec["spec"]["output"] = "runs/spec.json"
    spec_file.write_text(yaml.safe_dump(spec))
    monkeypatch.chdir(tmp_path / "elsewhere" / "runs")
    assert invoke("run", "-f", os.path.relpath(spec_file), "-q").exit_code == 0
    assert (tmp_path / "runs" / "spec.json").exists() and len(list((elsewhere / "runs").iterdir())) == 1
