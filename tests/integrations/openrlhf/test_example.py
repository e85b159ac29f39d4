"""examples/finetuning/openrlhf-reward.sh as written: its options parse with OpenRLHF's own parser, and OpenRLHF's
executor scores each dataset row through the reward file and spec the script names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalsi.rewards import clear_shared

ROOT = Path(__file__).parents[3]
STANDIN = Path(__file__).with_name("trainer_standin.py")


def test_the_openrlhf_example_trains_on_evalsis_reward(tmp_path: Path) -> None:
    clear_shared()
    out = tmp_path / "scored.jsonl"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHON": sys.executable,
        "OPENRLHF_TRAIN": f"{sys.executable} {STANDIN}",
        "STANDIN_OUT": str(out),
    }
    env.pop("EVALSI_REWARD_SPEC", None)  # the script sets it
    proc = subprocess.run(
        ["bash", str(ROOT / "examples" / "finetuning" / "openrlhf-reward.sh"), "tiny"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 8
    # even rows answered right (1.0), odd rows boxed but wrong (the format gate's 0.1)
    assert [row["reward"] for row in rows] == pytest.approx([1.0, 0.1] * 4)
    assert [row["correct"] for row in rows] == [1.0, 0.0] * 4
    assert all(row["format"] == 1.0 for row in rows)
