"""The examples under examples/finetuning run as written and score what a reader would expect."""

from __future__ import annotations

import json
import shutil
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
