"""`evalsi rewards rescore` on real data: the example math rollouts, a code run in the sandbox, exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.stats import estimate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "finetuning"


def run(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.stdout, result.stderr


def math_spec(tmp_path: Path, *, last_number: bool = True, buffer: int = 256) -> Path:
    text = (EXAMPLES / "math-reward.yaml").read_text()
    text = text.replace("buffer: 256", f"buffer: {buffer}")
    if not last_number:
        text = text.replace("      name: correct\n", "      name: correct\n      params: {last_number: false}\n")
    path = tmp_path / f"math-{last_number}-{buffer}.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def old_scores(tmp_path: Path) -> Path:
    output = tmp_path / "old.jsonl"
    spec = math_spec(tmp_path)
    code, _, err = run(
        [
            "rewards",
            "score",
            "--spec",
            str(spec),
            "--data",
            str(EXAMPLES / "math-rollouts.jsonl"),
            "--keep-rollouts",
            "-o",
            str(output),
        ]
    )
    assert code == 0, err
    return output


def test_keep_rollouts_writes_each_rollout_and_its_content_keys(old_scores: Path) -> None:
    lines = [json.loads(line) for line in old_scores.read_text().splitlines()]
    rollouts = [json.loads(line) for line in (EXAMPLES / "math-rollouts.jsonl").read_text().splitlines()]
    assert [line["rollout"] for line in lines] == rollouts
    assert all(set(line["keys"]) == {"format", "correct", "length"} for line in lines)
    assert lines[0]["keys"]["correct"] == lines[3]["keys"]["correct"]  # rows 0 and 3 are the same rollout
    assert lines[0]["keys"]["correct"] != lines[1]["keys"]["correct"]


def test_the_same_spec_changes_nothing_and_scores_nothing_again(tmp_path: Path, old_scores: Path) -> None:
    code, out, err = run(
        [
            "rewards",
            "rescore",
            "--spec",
            str(math_spec(tmp_path)),
            "--data",
            str(old_scores),
            "--json",
            "--fail-on-flip",
        ]
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["changedRollouts"] == 0 and (report["reused"], report["computed"]) == (36, 0)
    assert "0 of 12 rollouts judged differently" in err


def test_a_stricter_math_equiv_flips_the_unboxed_answer(tmp_path: Path, old_scores: Path) -> None:
    new = math_spec(tmp_path, last_number=False)
    output = tmp_path / "new.jsonl"
    code, out, err = run(
        ["rewards", "rescore", "--spec", str(new), "--data", str(old_scores), "--json", "-o", str(output)]
    )
    assert code == 0, err
    report = json.loads(out)
    diffs = {d["name"]: d for d in report["components"]}
    assert diffs["format"]["kind"] == diffs["length"]["kind"] == "unchanged"
    assert (diffs["format"]["reused"], diffs["length"]["reused"], diffs["correct"]["reused"]) == (12, 12, 0)
    correct = diffs["correct"]
    assert (correct["changed"], correct["down"], correct["up"]) == (1, 1, 0)
    example = correct["examples"][0]
    assert example["index"] == 2 and example["id"] == "gsm-1"  # "48 + 24 = 72 clips in total." has no boxed answer
    assert (example["old"]["value"], example["new"]["value"]) == (True, False)
    assert example["completion"] == "48 + 24 = 72 clips in total."
    old = [json.loads(line)["components"]["correct"]["value"] for line in old_scores.read_text().splitlines()]
    new_values = [json.loads(line)["components"]["correct"]["value"] for line in output.read_text().splitlines()]
    expected = estimate([float(b) - float(a) for a, b in zip(old, new_values, strict=True)])
    assert correct["difference"]["mean"] == pytest.approx(expected.mean)
    assert correct["difference"]["ci_low"] == pytest.approx(expected.ci_low)
    assert report["total"]["changed"] == 0  # that rollout was gated (no box) before and after
    assert "correct down: #2 (gsm-1): True -> False" in err
    assert "completion: '48 + 24 = 72 clips in total.'" in " ".join(err.split())
    assert "carry no content keys" not in err and report["keyed"] == 12


def test_fail_on_flip_and_a_flip_rate_threshold_exit_3(tmp_path: Path, old_scores: Path) -> None:
    new = math_spec(tmp_path, buffer=512)  # the length penalty moves on the one long rollout
    args = ["rewards", "rescore", "--spec", str(new), "--data", str(old_scores), "-q"]
    assert run(args)[0] == 0
    assert run([*args, "--fail-on-flip"])[0] == 3
    assert run([*args, "--max-flip-rate", "0.05"])[0] == 3  # 1 of 12 changed
    assert run([*args, "--max-flip-rate", "0.5"])[0] == 0


def test_rollouts_with_their_old_scores_file(tmp_path: Path) -> None:
    spec = math_spec(tmp_path)
    plain = tmp_path / "plain.jsonl"
    data = str(EXAMPLES / "math-rollouts.jsonl")
    assert run(["rewards", "score", "--spec", str(spec), "--data", data, "-o", str(plain), "-q"])[0] == 0
    code, out, err = run(
        [
            "rewards",
            "rescore",
            "--spec",
            str(math_spec(tmp_path, last_number=False)),
            "--data",
            data,
            "--old",
            str(plain),
            "--json",
        ]
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["reused"] == 0 and report["computed"] == 36  # a plain scores file records no content keys
    assert report["keyed"] == 0
    assert "12 of 12 old scores carry no content keys" in " ".join(err.split())
    assert {d["name"]: d["changed"] for d in report["components"]} == {"format": 0, "correct": 1, "length": 0}
    code, _, err = run(["rewards", "rescore", "--spec", str(spec), "--data", data])
    assert code == 2 and "give their old scores with --old" in err
    code, _, err = run(["rewards", "rescore", "--spec", str(spec), "--data", str(plain)])
    assert code == 2 and "plain.jsonl:1: has no rollout" in err


def test_a_run_results_file_is_rescored_sample_by_sample(tmp_path: Path) -> None:
    for name in ("math-run.yaml", "toy_model.py", "math-problems.jsonl"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    results = tmp_path / "gsm.json"
    proc = subprocess.run(
        [sys.executable, "-m", "evalsi", "run", "-q", "-f", str(tmp_path / "math-run.yaml"), "-o", str(results)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    new = tmp_path / "new.yaml"
    new.write_text(
        "apiVersion: evals.si/v1alpha1\nkind: RewardSpec\nmetadata: {name: exact}\nspec:\n  components:\n"
        "    - {ref: math-equiv}\n    - {ref: exact-match, name: exact}\n"
    )
    code, out, err = run(["rewards", "rescore", "--spec", str(new), "--data", str(results), "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert report["rollouts"] == 64 and report["total"] is None  # a run has no totals
    diffs = {d["name"]: d for d in report["components"]}
    assert diffs["math-equiv"]["kind"] == "unchanged"
    assert diffs["exact"]["kind"] == "added" and diffs["exact"]["meanNew"] == 0.0  # prose around every answer
    document = json.loads(results.read_text())
    samples = [s for r in document["records"] for s in r["samples"]]
    mean = sum(1.0 for s in samples if s["scores"]["math-equiv"]["value"]) / len(samples)
    assert diffs["math-equiv"]["meanOld"] == pytest.approx(mean) == diffs["math-equiv"]["meanNew"]


@pytest.mark.sandbox
def test_a_code_run_rescored_all_or_nothing_with_its_tests_from_the_run_spec(tmp_path: Path) -> None:
    (tmp_path / "coder.py").write_text(
        textwrap.dedent(
            """
            def answer(prompt: str) -> str:
                if "sum" in prompt:
                    return "```python\\na, b = map(int, input().split())\\nprint(a + b)\\n```"
                return "```python\\nprint(int(input()) * 2 if False else 0)\\n```"
            """
        )
    )
    rows = [
        {"id": "sum", "prompt": "Print the sum of two integers.", "tests": [{"input": "1 2\n", "output": "3\n"}]},
        {
            "id": "zero",
            "prompt": "Print 0 for 0 and 2n otherwise.",
            "tests": [{"input": "0\n", "output": "0\n"}, {"input": "4\n", "output": "8\n"}],
        },
    ]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_spec = tmp_path / "code-run.yaml"
    run_spec.write_text(
        textwrap.dedent(
            """
            apiVersion: evals.si/v1alpha1
            kind: RunSpec
            metadata: {name: coder}
            spec:
              target: {callable: "coder.py:answer"}
              dataset: {path: tasks.jsonl}
              evaluators:
                - {ref: code-exec-tests, name: tests, sandbox: {minIsolation: namespaced}}
            """
        )
    )
    results = tmp_path / "coder.json"
    proc = subprocess.run(
        [sys.executable, "-m", "evalsi", "run", "-q", "-f", str(run_spec), "-o", str(results)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    strict = tmp_path / "strict.yaml"
    strict.write_text(
        "apiVersion: evals.si/v1alpha1\nkind: RewardSpec\nmetadata: {name: strict}\nspec:\n  components:\n"
        "    - {ref: code-exec-tests, name: tests, sandbox: {minIsolation: namespaced},\n"
        "       params: {all_or_nothing: true}}\n"
    )
    code, out, err = run(
        ["rewards", "rescore", "--spec", str(strict), "--data", str(results), "--run-spec", str(run_spec), "--json"]
    )
    assert code == 0, err
    tests = json.loads(out)["components"][0]
    assert (tests["changed"], tests["down"]) == (1, 1)
    example = tests["examples"][0]
    assert example["id"] == "zero" and (example["old"]["value"], example["new"]["value"]) == (0.5, 0.0)
    code, out, err = run(["rewards", "rescore", "--spec", str(strict), "--data", str(results), "--json"])
    assert code == 0, err
    skipped = json.loads(out)["components"][0]
    assert skipped["statusChanges"] == 2  # without the run spec, the results file holds no test cases
    assert skipped["examples"][0]["new"]["status"] == "skipped"
