"""The ``evalsi.testing`` an uploaded evaluator imports in its sandbox: standard-library Python only, offering every
name of the real ``evalsi.testing`` an evaluation test uses to score rows.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

import evalsi.testing
from evalsi.server.evaluation.evaluators._runtime import runtime_dir

LOCAL_ONLY = {"EvaluationOutcome", "EvaluationTest", "find_evaluation_test", "results_db", "stored_results"}
"""Names that only mean something where pytest runs the test (outcomes, the local results store)."""

LIST_STAND_IN = """
import json, sys
sys.path.insert(0, sys.argv[1])
import evalsi.testing as testing
print(json.dumps({
    "public": sorted(n for n in vars(testing) if not n.startswith("_")),
    "modules": sorted(n for n in sys.modules if n == "evalsi" or n.startswith("evalsi.")),
}))
"""


def stand_in_names(runtime: Path) -> dict[str, list[str]]:
    """The stand-in's public names, imported by an interpreter that sees only the standard library and it."""
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", LIST_STAND_IN, str(runtime)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    names: dict[str, list[str]] = orjson.loads(done.stdout)
    return names


def test_the_stand_in_offers_the_names_of_evalsi_testing_that_score_rows(tmp_path: Path) -> None:
    found = stand_in_names(runtime_dir(tmp_path))
    assert set(found["public"]) == set(evalsi.testing.__all__) - LOCAL_ONLY
    assert "evalsi.testing._shim" in found["modules"]  # the stand-in, not the installed package


def test_the_stand_in_records_the_mode_and_returns_the_function(tmp_path: Path) -> None:
    runtime = runtime_dir(tmp_path)
    code = """
import sys
sys.path.insert(0, sys.argv[1])
from evalsi.testing import EvaluationSetupError, SingleTurnRolloutProcessor, evaluation_test

@evaluation_test(rollout_processor=SingleTurnRolloutProcessor(model="m"), mode="groupwise")
def scored(rows):
    return rows

assert scored([1]) == [1]
print(scored.__evalsi_evaluation_test__["mode"])
try:
    evaluation_test(mode="listwise")
except EvaluationSetupError as exc:
    print(exc)
"""
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, str(runtime)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["groupwise", "mode must be one of pointwise, groupwise, all (got 'listwise')"]
