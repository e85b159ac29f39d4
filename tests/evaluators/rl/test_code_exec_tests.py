"""code-exec-tests: test-case formats, scoring, limits in the details, the isolation floor, and the batch path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from evalsi.errors import SpecError
from evalsi.evaluators import ScoreContext, close_all, get_evaluator
from evalsi.evaluators.rl._code_compare import same_output, same_value
from evalsi.evaluators.rl._code_extract import extract_program
from evalsi.records import from_rollout
from evalsi.rewards import from_mapping
from evalsi.sandbox import close_shared_pools
from tests.sandbox._helpers import score, without_runsc  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(120)]
SUM = "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"


@pytest.fixture(autouse=True, scope="module")
def _pools() -> Iterator[None]:
    yield
    close_shared_pools()
    close_all()


def test_registered_with_its_contract():
    evaluator = get_evaluator("code-exec-tests")
    assert evaluator.pack == "rl" and evaluator.runs_code
    params = evaluator.parse_params({})
    assert params.min_isolation == "namespaced" and not params.all_or_nothing
    assert "completion" in evaluator.reads and "metadata.test_list" in evaluator.reads


def test_program_is_the_last_python_block_else_the_whole_completion():
    text = "Plan:\n```python\nprint(1)\n```\nBetter:\n```python\nprint(2)\n```\nDone."
    assert extract_program(text) == "print(2)\n"
    assert extract_program("```py\nx = 1\n```") == "x = 1\n"
    assert extract_program("print(3)") == "print(3)"


def test_stdin_stdout_tests_score_the_fraction_passed():
    tests = [{"input": "1 2", "output": "3"}, {"input": "2 2", "output": "4\n\n"}, {"input": "1 1", "output": "3"}]
    result = score(f"Here:\n```python\n{SUM}```", tests=tests)
    assert result.status == "ok" and result.value == pytest.approx(2 / 3)
    assert result.details is not None
    assert result.details["passed"] == 2 and result.details["total"] == 3
    assert result.details["first_failure"]["case"] == 2
    assert result.details["first_failure"]["reason"].startswith("wrong answer")


def test_all_or_nothing():
    tests = [{"input": "1 2", "output": "3"}, {"input": "1 1", "output": "3"}]
    assert score(SUM, {"all_or_nothing": True}, tests=tests).value == 0.0
    assert score(SUM, {"all_or_nothing": True}, tests=tests[:1]).value == 1.0


def test_tests_as_a_json_string_and_apps_inputs_outputs():
    tests = json.dumps([{"input": "4 5\n", "output": "9\n"}])
    assert score(SUM, tests=tests).value == 1.0
    assert score(SUM, inputs=["1 2\n", "3 3\n"], outputs=["3\n", "7\n"]).value == 0.5
    io = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})
    assert score(SUM, input_output=io).value == 1.0


def test_apps_call_based_with_fn_name():
    program = (
        "class Solution:\n"
        "    def twoSum(self, nums, target):\n"
        "        return [0, 1] if nums[0] + nums[1] == target else [1, 2]\n"
    )
    result = score(program, inputs=[[[2, 7, 11], 9], [[3, 2, 4], 6]], outputs=[[[0, 1]], [1, 2]], fn_name="twoSum")
    assert result.value == 1.0
    plain = "def double(x):\n    return (x * 2, x)\n"
    assert score(plain, inputs=[[2]], outputs=[[4, 2]], fn_name="double").value == 1.0
    missing = score(plain, inputs=[[2]], outputs=[4], fn_name="triple")
    assert missing.value == 0.0 and "triple" in str(missing.reason)


def test_mbpp_asserts_with_setup_and_imports():
    program = "def area(r):\n    return math.pi * r * r\nimport math\n"
    meta: dict[str, Any] = {
        "test_list": ["assert math.isclose(area(1), math.pi)", "assert area(0) == ZERO", "assert area(1) == 3"],
        "test_imports": ["import math"],
        "test_setup_code": "ZERO = 0.0",
    }
    result = score(program, **meta)
    assert result.value == pytest.approx(2 / 3)
    assert result.details is not None and result.details["first_failure"]["reason"].startswith("wrong answer")


def test_humaneval_check_script():
    test = (
        "METADATA = {}\n\ndef check(candidate):\n    assert candidate([1, 2, 3]) == 6\n    assert candidate([]) == 0\n"
    )
    assert score("def total(xs):\n    return sum(xs)\n", test=test, entry_point="total").value == 1.0
    assert score("def total(xs):\n    return 6\n", test=test, entry_point="total").value == 0.0


def test_float_tolerance():
    program = "print(1 / 3)"
    tests = [{"input": "", "output": "0.3333"}]
    assert score(program, tests=tests).value == 0.0
    assert score(program, {"float_tolerance": 1e-3}, tests=tests).value == 1.0
    assert same_output("1.0 2.0\n", "1.0  2.0000001", 1e-6)
    assert not same_output("1.0 x\n", "1.0 y", 1e-6)
    assert same_value((1, 2), [1, 2], 0) and not same_value(True, 1, 0) and same_value(0.1 + 0.2, 0.3, 1e-9)


@pytest.mark.parametrize(
    ("program", "params", "reason"),
    [
        ("print(", {}, "crash"),
        ("raise ValueError('boom')", {}, "crash"),
        ("while True: pass", {"timeout": 1}, "timeout"),
        ("x = bytearray(1 << 30)", {"memory_mb": 128}, "memory limit"),
        ("print(4)", {}, "wrong answer"),
    ],
)
def test_details_name_the_first_failure_and_why(program, params, reason):
    result = score(program, params, tests=[{"input": "", "output": "3"}])
    assert result.value == 0.0
    assert result.details is not None
    assert result.details["first_failure"]["reason"].startswith(reason), result.details
    assert str(result.reason).startswith("case 0 (tests[0]): " + reason)


def test_no_test_cases_is_skipped_and_malformed_cases_are_errors():
    assert score("print(1)").status == "skipped"
    bad = score("print(1)", tests=[{"input": "1"}])
    assert bad.status == "error" and "metadata.tests[0]" in str(bad.reason)
    assert score("print(1)", inputs=["1"], outputs=[]).status == "error"
    assert score("print(1)", test_list="assert True").status == "error"


@pytest.mark.usefixtures("without_runsc")
def test_isolation_floor_errors_naming_what_is_missing():
    result = score(SUM, {"min_isolation": "gvisor"}, tests=[{"input": "1 2", "output": "3"}])
    assert result.status == "error"
    assert "runsc" in str(result.reason) and "gvisor" in str(result.reason)
    assert score(SUM, {"min_isolation": "process"}, tests=[{"input": "1 2", "output": "3"}]).value == 1.0


def test_fresh_interpreter_baseline_agrees_with_the_fork_server():
    tests = [{"input": "1 2", "output": "3"}, {"input": "2 2", "output": "5"}]
    fast = score(SUM, tests=tests)
    slow = score(SUM, {"fresh_interpreter": True}, tests=tests)
    assert fast.value == slow.value == 0.5
    assert fast.details is not None and slow.details is not None
    assert fast.details["first_failure"] == slow.details["first_failure"]


def test_a_batch_runs_in_parallel_on_the_pool_and_keeps_order():
    evaluator = get_evaluator("code-exec-tests")
    records = []
    for i in range(12):
        program = f"print(int(input()) + {i % 3})"
        records.append(from_rollout({"completion": program, "tests": [{"input": "1", "output": "2"}]}))
    records.append(from_rollout({"completion": "print(1)"}))
    scores = evaluator.score_batch(records, evaluator.parse_params({}), ScoreContext("tests"))
    assert [s.value for s in scores[:12]] == [0.0, 1.0, 0.0] * 4
    assert scores[12].status == "skipped"


def test_reward_spec_min_isolation_reaches_the_component():
    spec: dict[str, Any] = {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RewardSpec",
        "metadata": {"name": "code"},
        "spec": {"components": [{"ref": "code-exec-tests", "name": "tests", "sandbox": {"minIsolation": "process"}}]},
    }
    reward = from_mapping(spec)
    (result,) = reward.score([{"completion": SUM, "tests": [{"input": "1 2", "output": "3"}]}])
    assert result.total == 1.0
    spec["spec"]["components"][0]["sandbox"] = {"minIsolation": "chroot"}
    with pytest.raises(SpecError, match="minIsolation"):
        from_mapping(spec)


HUMANEVAL_PROMPT = 'def add(x, y):\n    """Return x + y."""\n'
HUMANEVAL_TEST = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n"


@pytest.mark.parametrize(
    ("completion", "continue_prompt", "expected"),
    [
        ("    return x + y\n", True, 1.0),  # a body that continues the prompt
        ("```python\ndef add(x, y):\n    return x + y\n```", True, 1.0),  # a whole program: run as it is
        ("    return x - y\n", True, 0.0),
        ("    return x + y\n", False, 0.0),  # not continued: the body alone does not define add
    ],
)
def test_humaneval_completion_continues_the_prompt(completion: str, continue_prompt: bool, expected: float) -> None:
    reward = from_mapping(
        {
            "components": [
                {
                    "ref": "code-exec-tests",
                    "onError": "zero",
                    "params": {"continue_prompt": continue_prompt, "timeout": 5},
                }
            ]
        }
    )
    rollout = {"prompt": HUMANEVAL_PROMPT, "completion": completion, "test": HUMANEVAL_TEST, "entry_point": "add"}
    [result] = reward.score([rollout])
    assert result.components["code-exec-tests"].value == expected
