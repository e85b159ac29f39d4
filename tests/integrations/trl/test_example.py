"""examples/finetuning/grpo_trl.py as written: GRPO on evalsi's reward with a tiny model built on the CPU, the base
and each checkpoint evaluated by evalsi_callback and logged to TensorBoard at their steps; a stop file stops it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from evalsi.runs._results import read_results
from tests.integrations.torch.events import scalars

EXAMPLE = Path(__file__).parents[3] / "examples" / "finetuning" / "grpo_trl.py"


def run(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TENSORBOARD_LOGGING_DIR": str(tmp_path / "tb")}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--output-dir", str(tmp_path / "out"), *options],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_the_grpo_example_trains_on_the_reward_and_evaluates_each_checkpoint(tmp_path: Path) -> None:
    proc = run(tmp_path, "--report-to", "tensorboard")
    results = tmp_path / "out" / "evalsi-logs" / "grpo-demo" / "gsm-toy"
    assert sorted(p.name for p in results.glob("*.json")) == ["base.json", "step-2.json", "step-4.json"]
    assert all(read_results(p)["status"] == "complete" for p in results.glob("*.json"))
    points = scalars(tmp_path / "tb")
    assert [step for step, _ in points["eval/gsm-toy/math-equiv"]] == [0, 2, 4]  # base, then each save
    assert [step for step, _ in points["train/rewards/math-grpo/mean"]] == [1, 2, 3, 4]  # the reward's total
    assert "train/rewards/math-grpo/correct/mean" in points  # and each component beside it
    assert not (tmp_path / "out" / "evalsi-eval").exists()  # the base model's copy was removed once evaluated
    assert "trained 4 steps" in proc.stdout and "step 4: gsm-toy/math-equiv=" in proc.stdout


def test_the_grpo_example_stops_when_the_stop_file_exists(tmp_path: Path) -> None:
    stop = tmp_path / "STOP"
    stop.write_text('{"step": 100}')
    proc = run(tmp_path, "--stop-file", str(stop), "--max-steps", "50")
    assert "trained 1 steps" in proc.stdout
