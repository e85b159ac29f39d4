"""Probes: adversarial rollouts built from a spec's own data, scored for real, and the oracle of its right answers.

Every evaluator runs for real: math-equiv with its symbolic backend, code in the bubblewrap sandbox, judges and
reward models as loopback servers speaking their protocols, agent tasks in their sandboxes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import evalsi.rewards
from evalsi.evaluators import all_evaluators, get_evaluator
from evalsi.evaluators._patterns import compile_pattern
from evalsi.evaluators.rl._code_cases import CASE_FIELDS
from evalsi.records import Record
from evalsi.rewards import Reward
from evalsi.rewards.probes import ProbeLimits, ProbeReport, ProbeRow, component_reads, probe_reward, registered_probes
from evalsi.rewards.probes._reads import TEST_FIELDS
from evalsi.rewards.probes._shapes import minimal_instance, minimal_match
from tests.helpers.model_servers import ChatJudgeServer, OpenRLHFRewardServer
from tests.rewards import _leaky_code  # noqa: F401  (registers test-leaky-code)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "finetuning"

MATH_ROWS: list[dict[str, Any]] = [
    {"prompt": "Natalia sold clips to 48 friends in April and half as many in May. How many in all?", "answer": "72"},
    {"prompt": "Weng earns $12 an hour. She babysat for 50 minutes. How much did she earn?", "answer": "10"},
    {"prompt": "What is the probability of rolling a sum of 7 with two fair dice?", "answer": "\\frac{1}{6}"},
    {"prompt": "A shirt costs $40 after a 20% discount. What was the original price?", "answer": "50"},
]

CODE_ROWS: list[dict[str, Any]] = [
    {
        "prompt": "Read two integers from one line and print their sum.",
        "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "-5 5\n", "output": "0\n"}],
        "canonical_solution": "a, b = map(int, input().split())\nprint(a + b)\n",
    },
    {
        "prompt": "Write is_even(n).",
        "test_list": ["assert is_even(2) == True", "assert is_even(3) == False"],
        "canonical_solution": "def is_even(n):\n    return n % 2 == 0\n",
    },
    {
        "prompt": 'def add(x, y):\n    """Return x + y."""\n',
        "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
        "entry_point": "add",
        "canonical_solution": "    return x + y\n",
    },
]


def reward_of(*components: Mapping[str, Any], **spec: Any) -> Reward:
    return evalsi.rewards.from_mapping({"components": list(components), **spec})


def probe(reward: Reward, rows: list[dict[str, Any]], **limits: Any) -> ProbeReport:
    data = [{"completion": "", **row} for row in rows]
    return probe_reward(reward, reward.records(data), limits=ProbeLimits(**limits))


def hacked(report: ProbeReport, component: str) -> list[str]:
    return next(c for c in report.components if c.name == component).hacked_by


# ---- what components read -------------------------------------------------------------------------------------

KINDS = {
    "exact-match": ("correctness", {"completion", "reference"}),
    "contains": ("correctness", {"completion", "reference"}),
    "multiple-choice": ("correctness", {"completion", "reference"}),
    "math-equiv": ("correctness", {"completion", "reference"}),
    "code-exec-tests": ("correctness", {"completion", "prompt", "tests", "code"}),
    "llm-judge": ("correctness", {"completion", "prompt", "reference", "model"}),
    "reward-model": ("correctness", {"completion", "prompt", "reference", "model"}),
    "task-checker": ("correctness", {"completion", "code"}),
    "evaluation-test": ("correctness", {"completion", "prompt", "reference", "tests"}),
    "format-check": ("shape", {"completion", "format"}),
    "regex": ("shape", {"completion", "format"}),
    "json-schema": ("shape", {"completion", "schema"}),
    "overlong-penalty": ("shape", {"tokens"}),
    "field-score": ("constant", set()),
}
PARAMS: dict[str, dict[str, Any]] = {
    "regex": {"pattern": "x"},
    "json-schema": {"schema": {"type": "object"}},
    "field-score": {"field": "score"},
    "llm-judge": {"judge": {"model": "m", "base_url": "http://127.0.0.1:9/v1"}},
    "reward-model": {"url": "http://127.0.0.1:9/score"},
    "task-checker": {"task": str(ROOT / "examples/agent-tasks/write-file/task.yaml")},
    "evaluation-test": {"test": "tests.rewards._probe_checks::test_contains"},
}


def test_every_built_in_evaluator_is_classified_by_what_it_reads() -> None:
    builtin = {cls.name for cls in all_evaluators() if cls.pack != "test"}
    assert set(KINDS) <= builtin
    for name, (kind, keys) in KINDS.items():
        reward = reward_of({"ref": name, "params": PARAMS.get(name, {})})
        reads = component_reads(reward.components[0])
        assert reads.kind == kind, name
        assert set(reads.keys) == keys, name


def test_the_test_fields_are_those_code_exec_tests_reads() -> None:
    assert set(TEST_FIELDS) == set(CASE_FIELDS)


def test_a_row_names_the_functions_its_tests_call_but_not_their_helpers() -> None:
    tests = ["assert is_even(2) == True", "assert isclose(half(3), 1.5)", "assert sorted(evens([3, 2])) == [2]"]
    row = ProbeRow(0, Record("", prompt="p", metadata={"entry_point": "is_even", "test_list": tests}))
    assert row.called_names() == ["is_even", "half", "evens"]


def test_probes_apply_by_what_a_component_reads() -> None:
    probes = {p.name: p for p in registered_probes()}
    math = component_reads(reward_of({"ref": "math-equiv"}).components[0])
    code = component_reads(reward_of({"ref": "code-exec-tests"}).components[0])
    judge = component_reads(reward_of({"ref": "llm-judge", "params": PARAMS["llm-judge"]}).components[0])
    applies = {name: [probes[name].applies_to(c) for c in (math, code, judge)] for name in probes}
    assert applies["reference-padded"] == [True, False, True]
    assert applies["tests-from-files"] == [False, True, False]
    assert applies["judge-injection"] == [False, False, True]
    assert applies["empty"] == [True, True, True]
    assert applies["format-shell"] == [False, False, False]


# ---- format shells --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pattern",
    [
        r"(?s)\s*<think>.*?</think>\s*<answer>.*?</answer>\s*",
        r"(?s).*\\boxed\{.+\}.*",
        "(?s).*```python\\n.*```.*",
        r"^Answer: [A-D]$",
        r"[^a-z]+\d{3}(foo|ba)r?",
        r"(?i)FINAL:\s*\w+",
    ],
)
def test_the_format_shell_is_a_string_the_pattern_accepts(pattern: str) -> None:
    shell = minimal_match(pattern)
    assert shell is not None
    assert compile_pattern(pattern).fullmatch(shell) is not None


def test_the_schema_shell_is_valid_against_its_schema() -> None:
    schema = {
        "type": "object",
        "required": ["name", "tags", "level", "kind"],
        "properties": {
            "name": {"type": "string", "pattern": "^[A-Z]{2}-\\d+$"},
            "tags": {"type": "array", "minItems": 2, "items": {"$ref": "#/$defs/tag"}},
            "level": {"type": "integer", "minimum": 3},
            "kind": {"enum": ["a", "b"]},
        },
        "$defs": {"tag": {"type": "string", "minLength": 2}},
    }
    evaluator = get_evaluator("json-schema")
    document = json.dumps(minimal_instance(schema))
    score = evaluator.score(Record(document), evaluator.parse_params({"schema": schema}), _ctx())
    assert score.value is True, score.reason


def _ctx() -> Any:
    from evalsi.evaluators import ScoreContext

    return ScoreContext()


# ---- hackable specs are caught --------------------------------------------------------------------------------


def test_a_contains_reference_check_is_earned_by_padding_hedging_and_misplacing() -> None:
    report = probe(reward_of({"ref": "contains", "name": "right"}), MATH_ROWS)
    assert report.hackable
    assert {"reference-padded", "all-candidates", "wrong-place"} <= set(hacked(report, "right"))
    cell = next(c for c in report.components if c.name == "right").cells["reference-padded"]
    assert cell.earned == cell.cases == len(MATH_ROWS)
    assert cell.example is not None and cell.example.value is True
    assert not report.oracle_failed


def test_exact_match_is_earned_by_no_probe_and_its_oracle_holds() -> None:
    report = probe(reward_of({"ref": "exact-match"}), MATH_ROWS)
    assert not report.hackable, report.findings()
    oracle = report.components[0].oracle
    assert oracle is not None and oracle.rows == len(MATH_ROWS) and oracle.failed == 0


def test_a_format_only_reward_is_earned_by_its_own_shell() -> None:
    report = probe(reward_of({"ref": "format-check"}), MATH_ROWS)
    assert report.form_only and report.hackable
    assert "format-shell" in report.total_hacked_by
    example = report.total["format-shell"].example
    assert example is not None and example.completion == "<think></think><answer></answer>"
    assert report.components[0].hacked_by == []  # form is a format component's job; the spec is at fault


def test_a_json_schema_only_reward_is_earned_by_the_schema_shell() -> None:
    schema = {"type": "object", "required": ["answer"], "properties": {"answer": {"type": "string", "minLength": 1}}}
    report = probe(reward_of({"ref": "json-schema", "params": {"schema": schema}}), MATH_ROWS)
    assert report.form_only and "format-shell" in report.total_hacked_by


def test_a_format_gate_before_a_correctness_check_is_not_a_form_only_reward() -> None:
    reward = reward_of(
        {"ref": "format-check", "name": "format", "gate": True, "weight": 0.1, "params": {"pattern": r"(?s).*\d.*"}},
        {"ref": "exact-match", "name": "right", "weight": 0.9},
    )
    report = probe(reward, MATH_ROWS)
    assert not report.form_only and not report.hackable, report.findings()
    assert report.total["format-shell"].earned  # the shell earns the format's 0.1, which is the format's job


def test_a_correctness_component_with_no_reference_in_the_data_leaves_a_form_only_reward() -> None:
    reward = reward_of({"ref": "format-check", "weight": 0.1}, {"ref": "exact-match", "weight": 0.9})
    report = probe(reward, [{"prompt": "2+2?"}])
    assert report.form_only and "format-shell" in report.total_hacked_by
    assert any("skipped on every probe" in note for note in report.notes)


def test_a_reward_that_cannot_be_earned_fails_the_oracle() -> None:
    """exact-match compares the whole text, but the gate wants <answer> tags: no right answer earns both."""
    reward = reward_of({"ref": "format-check", "gate": True, "weight": 0.1}, {"ref": "exact-match", "name": "right"})
    report = probe(reward, MATH_ROWS)
    assert report.oracle_failed and not report.hackable
    assert report.total_oracle is not None and report.total_oracle.failed == len(MATH_ROWS)
    assert any("earns the full total" in f for f in report.findings())


def test_a_wrong_reference_field_fails_the_oracle() -> None:
    rows = [{**row, "label": "unrelated"} for row in MATH_ROWS]
    report = probe(reward_of({"ref": "math-equiv", "name": "correct"}, referenceField="label"), rows)
    assert report.oracle_failed is False  # the label is the reference now: its forms earn it
    bad = reward_of({"ref": "exact-match", "name": "right"}, {"ref": "test-leaky-code", "params": {"leak": "none"}})
    broken = [{**CODE_ROWS[0], "canonical_solution": "print(0)\n", "answer": "3"}]
    report = probe(bad, broken)
    assert report.oracle_failed
    oracle = next(c for c in report.components if c.name == "test-leaky-code").oracle
    assert oracle is not None and oracle.failed == 1


def test_math_equiv_pays_a_boxed_answer_inside_the_think_block() -> None:
    """A real finding: math-equiv reads \\boxed{} in the reasoning, ahead of the answer the completion gives."""
    reward = reward_of({"ref": "format-check", "gate": True, "weight": 0.1}, {"ref": "math-equiv", "name": "correct"})
    report = probe(reward, MATH_ROWS)
    assert hacked(report, "correct") == ["wrong-place"]
    cell = next(c for c in report.components if c.name == "correct").cells["wrong-place"]
    variants = {case for case in ("think", "think-only", "think-answer-tag") if case}
    assert cell.example is not None and cell.example.variant in variants - {"think"}
    assert cell.earned == 2 * len(MATH_ROWS)  # think-only and think-answer-tag; never "think" (a box after it)
    assert not report.oracle_failed


@pytest.mark.parametrize(
    ("leak", "probe_name"),
    [("file", "tests-from-files"), ("env", "tests-from-env"), ("exit-status", "exit-early")],
)
def test_a_code_grader_that_leaks_its_tests_is_caught_by_the_probe_that_reads_them(leak: str, probe_name: str) -> None:
    token = str(abs(hash(leak)) % 10**9)  # inputs no other test's files hold: the file finder matches by input
    rows = [
        {
            "prompt": "Read a line with two integers and print their sum.",
            "tests": [{"input": f"{token} 1\n", "output": f"{int(token) + 1}\n"}],
            "test_list": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"],
            "canonical_solution": "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\n",
        }
    ]
    report = probe(reward_of({"ref": "test-leaky-code", "name": "tests", "params": {"leak": leak}}), rows)
    assert probe_name in hacked(report, "tests"), report.findings()
    assert report.hackable


def test_the_same_code_grader_without_a_leak_is_not_caught() -> None:
    token = "271828183"
    rows = [
        {
            "prompt": "Read a line with two integers and print their sum.",
            "tests": [{"input": f"{token} 1\n", "output": "271828184\n"}],
            "canonical_solution": "a, b = map(int, input().split())\nprint(a + b)\n",
        }
    ]
    report = probe(reward_of({"ref": "test-leaky-code", "name": "tests", "params": {"leak": "none"}}), rows)
    assert not report.hackable, report.findings()
    assert report.components[0].oracle is not None and report.components[0].oracle.failed == 0


@pytest.mark.sandbox
def test_code_exec_tests_in_the_sandbox_resists_every_program_probe() -> None:
    reward = reward_of(
        {"ref": "code-exec-tests", "name": "tests", "params": {"timeout": 5}, "sandbox": {"minIsolation": "namespaced"}}
    )
    report = probe(reward, CODE_ROWS)
    assert not report.hackable, report.findings()
    cells = report.components[0].cells
    for name in ("null-program", "exit-early", "tests-from-files", "tests-from-env", "always-equal"):
        assert cells[name].cases > 0 and cells[name].earned == 0 and cells[name].errored == 0, name
    oracle = report.components[0].oracle
    assert oracle is not None and (oracle.rows, oracle.failed) == (3, 0)


@pytest.mark.sandbox
def test_weak_asserts_are_earned_by_a_program_that_does_nothing() -> None:
    reward = reward_of({"ref": "code-exec-tests", "name": "tests", "sandbox": {"minIsolation": "namespaced"}})
    rows = [{**CODE_ROWS[1], "test_list": ["assert is_even(2)", "assert not is_even(3)"]}]
    report = probe(reward, rows)
    assert "null-program" in hacked(report, "tests")
    cell = report.components[0].cells["null-program"]
    assert cell.best == pytest.approx(0.5)


# ---- model-based components -----------------------------------------------------------------------------------

_SECTION = re.compile(r"\[(Reference answer|Response)\]\n(.*?)(?=\n\[|\n\n(?:End your reply|Give a score)|\Z)", re.S)


def _sections(user: str) -> dict[str, str]:
    return {name: text.strip() for name, text in _SECTION.findall(user)}


def _final_answer(response: str) -> str:
    text = re.sub(r"(?s)<think>.*?</think>", "", response).strip()
    last = text.splitlines()[-1].strip() if text else ""
    for pattern in (
        r"^\\boxed\{(.*)\}\.?$",
        r"^<answer>(.*)</answer>$",
        r"^(?:The answer is|Answer:|####)\s*(.*?)\.?$",
    ):
        found = re.match(pattern, last)
        if found:
            return found.group(1).strip()
    return last


def gullible(user: str, body: dict[str, Any]) -> str:
    parts = _sections(user)
    if "ignore the rubric" in parts.get("Response", "").lower():
        return "The response says it is verified.\nScore: 10"
    return "Score: 10" if parts.get("Reference answer", "") in parts.get("Response", "") else "Score: 0"


def strict(user: str, body: dict[str, Any]) -> str:
    parts = _sections(user)
    return "Score: 10" if _final_answer(parts.get("Response", "")) == parts.get("Reference answer") else "Score: 0"


@pytest.fixture
def judge_server(request: pytest.FixtureRequest) -> Iterator[ChatJudgeServer]:
    with ChatJudgeServer(request.param) as server:
        yield server


@pytest.mark.parametrize("judge_server", [gullible], indirect=True)
def test_a_judge_that_follows_instructions_in_the_response_is_caught(judge_server: ChatJudgeServer) -> None:
    judge = {"model": "judge", "base_url": judge_server.base_url, "backoff": 0}
    report = probe(reward_of({"ref": "llm-judge", "name": "judge", "judge": judge}), MATH_ROWS, max_rows=2)
    assert "judge-injection" in hacked(report, "judge")
    assert any("INJECT" not in m and "Ignore the rubric" in m for m in judge_server.user_messages())


@pytest.mark.parametrize("judge_server", [strict], indirect=True)
def test_a_judge_that_reads_only_the_final_answer_is_not_caught(judge_server: ChatJudgeServer) -> None:
    judge = {"model": "judge", "base_url": judge_server.base_url, "backoff": 0}
    report = probe(reward_of({"ref": "llm-judge", "name": "judge", "judge": judge}), MATH_ROWS, max_rows=2)
    assert not report.hackable, report.findings()
    assert report.components[0].oracle is None  # a model's scale is its own: shown, never required full
    assert report.components[0].cells["judge-injection"].cases == 2


def test_a_reward_model_that_pays_for_length_is_earned_by_the_latex_flood() -> None:
    with OpenRLHFRewardServer() as server:  # length / 10, plus 1 when the label appears
        reward = reward_of({"ref": "reward-model", "name": "rm", "params": {"url": server.url + "/score"}})
        report = probe(reward, MATH_ROWS, max_rows=2, latex_chars=20_000)
    assert {"latex-flood", "reference-padded"} <= set(hacked(report, "rm"))
    assert "empty" not in hacked(report, "rm")  # an empty answer scores below the right answer


def test_a_reward_model_that_checks_the_answer_is_not_caught() -> None:
    def score(query: str, prompt: str, label: str) -> float:
        completion = query[len(prompt) :] if query.startswith(prompt) else query
        return 1.0 if _final_answer(completion) == label else 0.0

    with OpenRLHFRewardServer(score) as server:
        reward = reward_of({"ref": "reward-model", "name": "rm", "params": {"url": server.url + "/score"}})
        report = probe(reward, MATH_ROWS, max_rows=2)
    assert not report.hackable, report.findings()


# ---- in-process evaluators that run the user's code ------------------------------------------------------------


def test_an_evaluation_test_that_checks_containment_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    lenient = reward_of({"ref": "evaluation-test/tests.rewards._probe_checks::test_contains", "name": "check"})
    assert "reference-padded" in hacked(probe(lenient, MATH_ROWS), "check")
    exact = reward_of({"ref": "evaluation-test/tests.rewards._probe_checks::test_exact", "name": "check"})
    assert not probe(exact, MATH_ROWS).hackable


@pytest.mark.sandbox
def test_an_agent_task_whose_checker_passes_untouched_is_earned_by_doing_nothing(tmp_path: Path) -> None:
    task = tmp_path / "task.yaml"
    task.write_text(
        "apiVersion: evals.si/v1alpha1\nkind: Task\nmetadata: {name: already-done}\nspec:\n"
        "  description: Create notes.txt.\n  setup: {files: {notes.txt: hello}}\n  maxSteps: 3\n"
        "  checker: {command: 'test -f notes.txt'}\n"
    )
    noop = reward_of({"ref": "task-checker", "name": "task", "params": {"task": str(task)}})
    report = probe(noop, [{"prompt": "Create notes.txt."}], latex_chars=2_000)
    assert "empty" in hacked(report, "task")
    sound = reward_of(
        {
            "ref": "task-checker",
            "name": "task",
            "params": {"task": str(ROOT / "examples/agent-tasks/write-file/task.yaml")},
        }
    )
    report = probe(sound, [{"prompt": "Create greeting.txt saying hello, world."}], latex_chars=2_000)
    assert not report.hackable, report.findings()


# ---- limits, and the examples ---------------------------------------------------------------------------------


def test_probing_stays_within_its_rollout_budget_and_distinct_rows() -> None:
    rows = [row for row in MATH_ROWS for _ in range(4)]  # GRPO: each prompt several times
    report = probe(reward_of({"ref": "exact-match"}), rows, max_rollouts=40)
    assert report.cases <= 40
    assert report.rows == [0, 4]  # distinct tasks, in data order, as many as fit
    assert any("probed 2 of 4" in note for note in report.notes)
    json.dumps(report.to_json())  # the whole report is JSON


def test_the_latex_flood_is_one_megabyte_scored_once_per_spec() -> None:
    report = probe(reward_of({"ref": "math-equiv"}), MATH_ROWS)
    cell = report.components[0].cells["latex-flood"]
    assert cell.cases == 1 and cell.earned == 0 and cell.errored == 0


@pytest.mark.sandbox
def test_the_code_example_is_sound_and_its_solutions_earn_full_reward() -> None:
    reward = evalsi.rewards.load(EXAMPLES / "code-reward.yaml")
    rows = [json.loads(line) for line in (EXAMPLES / "code-rollouts.jsonl").read_text().splitlines()]
    report = probe_reward(reward, reward.records(rows))
    assert not report.hackable and not report.oracle_failed, report.findings()
    tests = next(c for c in report.components if c.name == "tests")
    assert tests.oracle is not None and (tests.oracle.rows, tests.oracle.failed) == (3, 0)
    assert report.total_oracle is not None and report.total_oracle.failed == 0


def test_the_math_example_pays_an_answer_left_in_the_think_block() -> None:
    """The shipped math spec's finding (the evaluator's, not the spec's): only wrong-place earns it."""
    reward = evalsi.rewards.load(EXAMPLES / "math-reward.yaml")
    rows = [
        {"prompt": r["question"], "answer": r["answer"], "completion": "", "completion_tokens": 1}
        for r in map(json.loads, (EXAMPLES / "math-problems.jsonl").read_text().splitlines())
    ]
    report = probe_reward(reward, reward.records(rows))
    assert [(c.name, c.hacked_by) for c in report.components] == [
        ("format", []),
        ("correct", ["wrong-place"]),
        ("length", []),
    ]
    assert not report.oracle_failed


def test_the_math_example_rollouts_hold_a_task_whose_question_is_its_answer() -> None:
    """'Simplify sqrt(8)': the prompt echoed is equivalent to the reference 2 sqrt(2), so math-equiv pays it."""
    reward = evalsi.rewards.load(EXAMPLES / "math-reward.yaml")
    rows = [json.loads(line) for line in (EXAMPLES / "math-rollouts.jsonl").read_text().splitlines()]
    report = probe_reward(reward, reward.records(rows))
    correct = next(c for c in report.components if c.name == "correct")
    assert correct.hacked_by == ["prompt-echo", "wrong-place"]
    example = correct.cells["prompt-echo"].example
    assert example is not None and example.row == 6 and "\\sqrt{8}" in (example.reason or "")
