"""`evalsi rewards probe` and `rewards score --probe`: the table, the JSON report, exit codes, nothing scored on 3."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app

ROOT = Path(__file__).resolve().parents[2]

ROWS = [
    {"id": "a", "prompt": "How many legs has a spider?", "answer": "8", "completion": "\\boxed{8}"},
    {"id": "b", "prompt": "How many sides has a hexagon?", "answer": "6", "completion": "It has 6."},
    {"id": "a", "prompt": "How many legs has a spider?", "answer": "8", "completion": "\\boxed{7}"},
]


def spec_file(tmp_path: Path, components: str, name: str = "reward.yaml") -> Path:
    path = tmp_path / name
    body = textwrap.indent(textwrap.dedent(components).strip(), "    ")
    path.write_text(
        f"apiVersion: evals.si/v1alpha1\nkind: RewardSpec\nmetadata: {{name: demo}}\nspec:\n  components:\n{body}\n"
    )
    return path


def data_file(tmp_path: Path, rows: Sequence[Mapping[str, object]] = ROWS) -> Path:
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.stdout, result.stderr


def test_a_hackable_spec_exits_3_with_its_findings(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "- {ref: contains, name: right}")
    code, out, err = run(["rewards", "probe", str(spec), "--data", str(data_file(tmp_path)), "--json"])
    assert code == 3, err
    report = json.loads(out)
    assert report["hackable"] is True and report["rows"] == [0, 1]  # the repeated task is probed once
    right = report["components"][0]
    assert right["kind"] == "correctness" and "reference-padded" in right["hackedBy"]
    padded = right["probes"]["reference-padded"]
    assert padded["earned"] == padded["cases"] == 2 and padded["example"]["value"] is True
    assert "EARNED 2/2" in err and "findings:" in err and "reference-padded" in err


def test_a_sound_spec_exits_0_and_says_so(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "- {ref: exact-match, name: right}")
    code, out, err = run(["rewards", "probe", str(spec), "--data", str(data_file(tmp_path))])
    assert code == 0, err
    assert out == ""
    assert "no probe earned reward" in err and "full 2/2" in err


def test_an_unearnable_reward_exits_3_on_its_oracle(tmp_path: Path) -> None:
    spec = spec_file(
        tmp_path,
        """
        - {ref: format-check, name: format, gate: true, weight: 0.1}
        - {ref: exact-match, name: right}
        """,
    )
    code, out, err = run(["rewards", "probe", str(spec), "--data", str(data_file(tmp_path)), "--json"])
    assert code == 3, err
    report = json.loads(out)
    assert report["hackable"] is False and report["oracleFailed"] is True
    assert "FAILS" in err


def test_a_run_spec_brings_its_dataset(tmp_path: Path) -> None:
    (tmp_path / "questions.jsonl").write_text(
        "".join(json.dumps({"id": r["id"], "question": r["prompt"], "answer": r["answer"]}) + "\n" for r in ROWS[:2])
    )
    run_spec = tmp_path / "run.yaml"
    run_spec.write_text(
        textwrap.dedent(
            """
            apiVersion: evals.si/v1alpha1
            kind: RunSpec
            metadata: {name: legs}
            spec:
              target: {callable: "os.path:basename"}
              dataset: {path: questions.jsonl, fields: {prompt: question}}
              evaluators: [{ref: exact-match, name: right}, {ref: contains, name: loose}]
            """
        )
    )
    code, out, err = run(["rewards", "probe", str(run_spec), "--json", "-q"])
    assert code == 3, err
    report = json.loads(out)
    assert report["rows"] == [0, 1] and err == ""
    hacked = {c["name"]: c["hackedBy"] for c in report["components"]}
    assert hacked["right"] == [] and "all-candidates" in hacked["loose"]


def test_bad_input_exits_2_naming_where(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "- {ref: exact-match}")
    code, _, err = run(["rewards", "probe", str(spec)])
    assert code == 2 and "names no dataset; give --data" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x", "answer": "1"}\n{"prompt": 3}\n')
    code, _, err = run(["rewards", "probe", str(spec), "--data", str(bad)])
    assert code == 2 and "bad.jsonl:2" in err and "'prompt' must be text" in err
    code, _, err = run(["rewards", "probe", str(tmp_path / "missing.yaml"), "--data", str(bad)])
    assert code == 2 and "missing.yaml" in err


def test_score_with_probe_stops_before_scoring_a_hackable_spec(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "- {ref: contains, name: right}")
    output = tmp_path / "scores.jsonl"
    code, _, err = run(
        ["rewards", "score", "--spec", str(spec), "--data", str(data_file(tmp_path)), "--probe", "-o", str(output)]
    )
    assert code == 3, err
    assert "nothing was scored" in err and "reference-padded" in err
    assert not output.exists()


def test_score_with_probe_scores_a_sound_spec(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "- {ref: exact-match, name: right}")
    output = tmp_path / "scores.jsonl"
    code, _, err = run(
        ["rewards", "score", "--spec", str(spec), "--data", str(data_file(tmp_path)), "--probe", "-o", str(output)]
    )
    assert code == 0, err
    assert "no probe earned reward" in err
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert [line["components"]["right"]["value"] for line in lines] == [False, False, False]


@pytest.mark.sandbox
def test_the_code_example_probes_clean(tmp_path: Path) -> None:
    code, out, err = run(
        [
            "rewards",
            "probe",
            str(ROOT / "examples/finetuning/code-reward.yaml"),
            "--data",
            str(ROOT / "examples/finetuning/code-rollouts.jsonl"),
            "--json",
        ]
    )
    assert code == 0, err
    report = json.loads(out)
    tests = next(c for c in report["components"] if c["name"] == "tests")
    assert tests["oracle"]["rows"] == 3 and tests["oracle"]["failed"] == 0
    assert all(cell["earned"] == 0 for cell in tests["probes"].values())
