"""`evalsi rewards score`: output rows, summary, exit codes, and no partial output on failure."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app

SPEC = textwrap.dedent(
    """
    apiVersion: evals.si/v1alpha1
    kind: RewardSpec
    metadata: {name: demo}
    spec:
      components:
        - ref: format-check
          name: format
          weight: 0.25
          gate: true
          params: {pattern: "(?s).*ANSWER:.*"}
        - ref: contains
          name: right
          weight: 0.75
        - ref: overlong-penalty
          name: length
          params: {max_length: 100, buffer: 50}
    """
)


def run(args: list[str]) -> tuple[int, str, str]:
    runner = CliRunner()
    result = runner.invoke(app, args)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "reward.yaml"
    path.write_text(SPEC)
    return path


def rollouts(tmp_path: Path, rows: list[dict[str, object]], name: str = "rollouts.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


ROWS: list[dict[str, object]] = [
    {"id": "a", "completion": "ANSWER: 42", "answer": "42", "completion_tokens": 10},
    {"completion": "no format 42", "answer": "42"},
    {"completion": "ANSWER: 41", "answer": "42", "completion_tokens": 75},
    {"completion": "ANSWER: 42"},
]


def test_writes_one_row_per_rollout_in_order(tmp_path: Path, spec: Path) -> None:
    out = tmp_path / "scores.jsonl"
    code, _, stderr = run(
        ["rewards", "score", "--spec", str(spec), "--data", str(rollouts(tmp_path, ROWS)), "-o", str(out)]
    )
    assert code == 0, stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2, 3]
    assert rows[0] == {
        "index": 0,
        "id": "a",
        "total": 1.0,
        "status": "ok",
        "components": {
            "format": {"value": True, "status": "ok", "reason": None},
            "right": {"value": True, "status": "ok", "reason": None},
            "length": {"value": 0.0, "status": "ok", "reason": None},
        },
    }
    assert "id" not in rows[1]
    assert (rows[1]["total"], rows[1]["status"]) == (0.0, "gated")
    assert rows[2]["total"] == pytest.approx(0.25 - 0.5)
    assert rows[3]["components"]["right"]["status"] == "skipped"
    assert rows[3]["components"]["length"]["reason"].startswith("no completion_tokens")
    assert "reward 'demo': 4 rollouts" in stderr
    assert "cache:" in stderr


def test_the_cache_summary_counts_repeats_in_a_batch_apart_from_misses(tmp_path: Path, spec: Path) -> None:
    rows = [ROWS[0]] * 5 + [ROWS[2]]  # GRPO-style repeats: 2 distinct rollouts, each component computed twice
    code, _, stderr = run(["rewards", "score", "-s", str(spec), "-d", str(rollouts(tmp_path, rows))])
    assert code == 0
    summary = " ".join(stderr.split())
    assert "cache: 0 hits, 12 repeats in a batch (computed once), 6 misses; 67% not computed" in summary


def test_stdout_output_and_json_array_input(tmp_path: Path, spec: Path) -> None:
    data = tmp_path / "rollouts.json"
    data.write_text(json.dumps(ROWS))
    code, stdout, _ = run(["rewards", "score", "-s", str(spec), "-d", str(data), "-q"])
    assert code == 0
    assert len(stdout.splitlines()) == 4


def test_parquet_input(tmp_path: Path, spec: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    data = tmp_path / "rollouts.parquet"
    pq.write_table(pa.Table.from_pylist([{"completion": "ANSWER: 1", "answer": "1"}]), data)
    code, stdout, _ = run(["rewards", "score", "-s", str(spec), "-d", str(data), "-q"])
    assert code == 0
    assert json.loads(stdout)["total"] == 1.0


def test_bad_jsonl_line_is_reported_with_its_number(tmp_path: Path, spec: Path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"completion": "x"}\n\n{"completion": \n')
    code, _, stderr = run(["rewards", "score", "-s", str(spec), "-d", str(data)])
    assert code == 2
    assert f"{data}:3: not valid JSON" in stderr


def test_bad_rollout_names_its_file_and_line(tmp_path: Path, spec: Path) -> None:
    data = tmp_path / "rollouts.jsonl"
    data.write_text('{"completion": "x"}\n\n{"completion": "y"}\n{"prompt": "p"}\n')
    code, _, stderr = run(["rewards", "score", "-s", str(spec), "-d", str(data)])
    assert code == 2
    assert f"{data}:4: has no 'completion'" in stderr and "rollout 2" not in stderr
    array = tmp_path / "rollouts.json"
    array.write_text(json.dumps([{"completion": "x"}, {"completion": 3}]))
    code, _, stderr = run(["rewards", "score", "-s", str(spec), "-d", str(array)])
    assert code == 2
    assert f"{array}: item [1]: 'completion' must be text" in stderr


def test_data_from_stdin(spec: Path) -> None:
    rows = "".join(json.dumps(r) + "\n" for r in ROWS)
    result = CliRunner().invoke(app, ["rewards", "score", "-s", str(spec), "-d", "-", "-q"], input=rows)
    assert result.exit_code == 0, result.stderr
    assert [json.loads(line)["index"] for line in result.stdout.splitlines()] == [0, 1, 2, 3]
    bad = CliRunner().invoke(app, ["rewards", "score", "-s", str(spec), "-d", "-"], input='{"completion": 1}\n')
    assert bad.exit_code == 2 and "<stdin>:1: 'completion' must be text" in bad.stderr


def test_bad_spec_exits_2_with_location(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(SPEC.replace("ref: contains", "ref: contain"))
    code, _, stderr = run(["rewards", "score", "-s", str(spec), "-d", str(rollouts(tmp_path, ROWS))])
    assert code == 2
    assert "bad.yaml:12: spec.components[1].ref: unknown evaluator 'contain'" in stderr


def test_raise_error_fails_the_batch_and_leaves_no_output(tmp_path: Path) -> None:
    spec = tmp_path / "fields.yaml"
    spec.write_text(
        "apiVersion: evals.si/v1alpha1\nkind: RewardSpec\nmetadata: {name: f}\n"
        "spec:\n  components:\n    - ref: field-score\n      name: judge\n      params: {field: s}\n"
    )
    rows = [{"completion": "x", "s": 1}] * 600 + [{"completion": "y", "s": {"status": "error", "reason": "judge down"}}]
    out = tmp_path / "out.jsonl"
    code, _, stderr = run(["rewards", "score", "-s", str(spec), "-d", str(rollouts(tmp_path, rows)), "-o", str(out)])
    assert code == 1
    assert "rollouts.jsonl:601: component 'judge' errored: judge down" in stderr
    assert not out.exists()
    assert list(tmp_path.glob(".out.jsonl*")) == []


def test_console_script_runs_for_real(tmp_path: Path, spec: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "evalsi", "rewards", "score", "-s", str(spec), "-d", str(rollouts(tmp_path, ROWS))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 4
    missing = subprocess.run(
        [sys.executable, "-m", "evalsi", "rewards", "score", "-s", str(spec)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2


def test_evaluators_list_and_describe() -> None:
    code, stdout, _ = run(["evaluators", "list"])
    assert code == 0
    assert "overlong-penalty" in stdout and "exact-match" in stdout
    code, stdout, _ = run(["evaluators", "describe", "overlong-penalty"])
    assert code == 0
    assert "max_length" in stdout and "20480" in stdout and "completion_tokens" in stdout
    code, stdout, _ = run(["evaluators", "describe", "llm-judge"])
    assert code == 0
    assert "judge.model" in stdout and "judge.verdict" in stdout  # a nested config lists its own fields
    assert "evalsi.evaluators" not in stdout  # types read as names, not module paths
    code, _, stderr = run(["evaluators", "describe", "overlong"])
    assert code == 2
    assert "did you mean 'overlong-penalty'" in stderr
