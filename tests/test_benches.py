"""Every bench in ``bench/`` still runs: its ``--quick`` mode (seconds, scaled down) ends cleanly with a ratio.

The full benches are run by hand for the performance table of the manual's Development page; a quick run here
keeps them from rotting (an API they call renamed, a field they read gone). No threshold is checked: a shared CI
machine's timings say nothing, only that the bench measured both sides and printed how they compare.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IN_SESSIONS = {"ray_scaling.py": "ray"}
"""Benches whose library the core environment lacks: their nox session runs their quick mode instead."""
BENCHES = sorted(
    path.name
    for path in (ROOT / "bench").glob("*.py")
    if path.name not in IN_SESSIONS and not path.name.startswith("_")
)
RATIO = re.compile(r"\d(?:\.\d+)?\s?[x×](?!\w)|[+-]\d+(?:\.\d+)?%")
"""A ratio as the benches print one: ``1.06x``, ``143x``, ``0.97 ×``, or an overhead, ``+12.5%``."""


def test_the_benches_are_found() -> None:
    assert "generation_concurrency.py" in BENCHES and len(BENCHES) > 10


@pytest.mark.parametrize(("bench", "session"), sorted(IN_SESSIONS.items()))
def test_a_bench_left_to_a_session_is_run_quick_there(bench: str, session: str) -> None:
    noxfile = (ROOT / "noxfile.py").read_text()
    body = noxfile.split(f'@nox.session(name="{session}")', 1)[1].split("@nox.session", 1)[0]
    assert f'"bench/{bench}", "--quick"' in body, f"the {session} session does not run bench/{bench} --quick"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("bench", BENCHES)
def test_a_quick_bench_runs_and_prints_its_ratio(bench: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / bench), "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert done.returncode == 0, f"{bench} --quick failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert RATIO.search(done.stdout), f"{bench} --quick printed no ratio:\n{done.stdout[-3000:]}"
