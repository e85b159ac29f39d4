"""The run engine stands alone: evalsi.runs never imports evalsi.training (checkpoints build on runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import evalsi.runs


def test_runs_never_imports_training() -> None:
    code = "import sys, evalsi.runs, evalsi.cli.run; print('evalsi.training' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    for source in Path(evalsi.runs.__file__).parent.glob("*.py"):
        assert "evalsi.training" not in source.read_text(), source


def test_a_single_spec_path_is_accepted(tmp_path: Path) -> None:
    from evalsi.training import CheckpointEvaluator
    from tests.training.conftest import write_spec

    spec = write_spec(tmp_path)
    evaluator = CheckpointEvaluator(str(spec), training_run="grpo-1")
    assert [s.name for s in evaluator.specs] == ["forgetting"]
