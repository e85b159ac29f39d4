"""The examples under examples/finetuning run as written and score what a reader would expect.

The examples that need torch or a trainer run in their nox sessions, with the tests beside that session's other
tests: grpo_trl.py in tests/integrations/trl, openrlhf-reward.sh in tests/integrations/openrlhf (the trl
session), verl-reward.yaml in tests/integrations/verl. ``test_every_example_is_run_by_a_test`` checks that none
is left out.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).parents[1] / "examples" / "finetuning"


def score(spec: str, data: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evalsi",
            "rewards",
            "score",
            "--spec",
            str(EXAMPLES / spec),
            "--data",
            str(EXAMPLES / data),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    assert "reward '" in proc.stderr  # the summary
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_math_example() -> None:
    rows = score("math-reward.yaml", "math-rollouts.jsonl")
    totals = [row["total"] for row in rows]
    assert totals == pytest.approx([1.0, 0.1, 0.0, 1.0, 1.0, 0.1, 1.0, 1.0 - 132 / 256, 1.0, 0.0, 1.0, 0.1])
    assert rows[2]["status"] == "gated"
    assert rows[6]["components"]["correct"]["value"] is True  # 2\sqrt{2}, decided symbolically


@pytest.mark.sandbox
def test_code_example() -> None:
    rows = score("code-reward.yaml", "code-rollouts.jsonl")
    totals = [row["total"] for row in rows]
    assert totals == pytest.approx([1.0, 0.1, 0.0, 0.1 + 0.9 / 3, 1.0, 0.1, 1.0, 0.1])
    assert "timeout" in rows[7]["components"]["tests"]["reason"]


def test_the_run_example_writes_its_results_in_the_working_directory(tmp_path: Path) -> None:
    """As a user runs it from a clone: the results land where the command runs, never beside the spec."""
    example = tmp_path / "examples"
    example.mkdir()
    for name in ("math-run.yaml", "toy_model.py", "math-problems.jsonl"):
        shutil.copy(EXAMPLES / name, example / name)
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "evalsi", "run", "-q", "-f", str(example / "math-run.yaml")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=work,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in work.iterdir()) == ["gsm-toy.results.json"]
    assert sorted(p.name for p in example.iterdir()) == ["math-problems.jsonl", "math-run.yaml", "toy_model.py"]


def test_run_example(tmp_path: Path) -> None:
    results = tmp_path / "gsm.json"
    proc = subprocess.run(
        [sys.executable, "-m", "evalsi", "run", "-f", str(EXAMPLES / "math-run.yaml"), "--set", f"output={results}"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "pass@4/math-equiv" in proc.stdout + proc.stderr
    data = json.loads(results.read_text())
    assert len(data["records"]) == 8
    assert all(len(record["samples"]) == 8 for record in data["records"])
    failing = subprocess.run(
        [
            sys.executable,
            "-m",
            "evalsi",
            "run",
            "-f",
            str(EXAMPLES / "math-run.yaml"),
            "--set",
            f"output={tmp_path / 'strict.json'}",
            "--set",
            "gates=[{metric: math-equiv, min: 0.99}]",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert failing.returncode == 3, failing.stderr


def test_watch_example_writes_the_stop_file_when_a_checkpoint_regresses(tmp_path: Path) -> None:
    """watch-checkpoints.sh as written, `vllm` being the stand-in (vLLM needs a GPU): the base is evaluated, then
    each checkpoint the "trainer" (this test) saves; the one that forgot the answers writes the stop file."""
    from tests.helpers.vllm_standin import standin_executable
    from tests.training.conftest import write_model
    from tests.training.watching import wait_for

    rows = [json.loads(line) for line in (EXAMPLES / "math-problems.jsonl").read_text().splitlines()]
    prompts = {f"{row['question']}\nPut the final answer in \\boxed{{}}.": row["answer"] for row in rows}
    right = {prompt: f"It is \\boxed{{{answer}}}." for prompt, answer in prompts.items()}
    wrong = {prompt: f"It is \\boxed{{{int(answer) + 1}}}." for prompt, answer in prompts.items()}
    out = tmp_path / "out"
    out.mkdir()
    base = write_model(tmp_path / "base-model", right)
    standin = standin_executable(tmp_path / "bin")
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(standin.parent), str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "SETTLE": "0.5",
    }
    log = (tmp_path / "watch.log").open("wb")
    proc = subprocess.Popen(
        ["bash", str(EXAMPLES / "watch-checkpoints.sh"), str(out), str(base)],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    results = out / "evalsi-logs" / "grpo-demo" / "gsm-toy"
    try:
        write_model(out / "checkpoint-100", right)
        wait_for(lambda: (results / "step-100.json").exists(), 240, "step 100 evaluated")
        assert not (out / "STOP").exists()
        write_model(out / "checkpoint-200", wrong)
        wait_for(lambda: (out / "STOP").exists(), 240, "the stop file")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    assert code == 3, (tmp_path / "watch.log").read_text()  # a checkpoint regressed
    stop = json.loads((out / "STOP").read_text())
    assert stop["step"] == 200 and stop["regressions"] == ["math-equiv:0.1"]
    assert sorted(p.name for p in results.glob("*.json")) == ["base.json", "step-100.json", "step-200.json"]


def test_every_example_is_run_by_a_test() -> None:
    """Each runnable example (a spec, script or config) is named by a test here or in an integration session."""
    tests = Path(__file__).parent
    text = Path(__file__).read_text() + "".join(p.read_text() for p in (tests / "integrations").glob("*/test_*.py"))
    helpers = {"toy_model.py"}  # the stand-in model math-run.yaml calls
    runnable = [p.name for p in EXAMPLES.iterdir() if p.suffix in {".py", ".sh", ".yaml"} and p.name not in helpers]
    assert sorted(name for name in runnable if name not in text) == []
