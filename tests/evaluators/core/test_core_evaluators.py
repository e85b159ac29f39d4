"""The core evaluators and the rl pack's format-check and overlong-penalty, as documented."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from evalsi.evaluators import Score, ScoreContext, get_evaluator
from evalsi.evaluators.rl.overlong_penalty import overlong_penalty
from evalsi.records import from_rollout


def score(name: str, rollout: dict[str, Any], **params: Any) -> Score:
    evaluator = get_evaluator(name)
    return evaluator.score_batch([from_rollout(rollout)], evaluator.parse_params(params), ScoreContext())[0]


@pytest.mark.parametrize(
    ("completion", "reference", "params", "expected"),
    [
        ("42", "42", {}, True),
        (" 42\n", "42", {}, True),
        (" 42\n", "42", {"strip": False}, False),
        ("Paris", "paris", {}, False),
        ("Paris", "paris", {"ignore_case": True}, True),
        ("a  b", "a b", {"collapse_whitespace": True}, True),
        ("b", ["a", "b"], {}, True),
    ],
)
def test_exact_match(completion: str, reference: Any, params: dict[str, Any], expected: bool) -> None:
    assert score("exact-match", {"completion": completion, "answer": reference}, **params).value is expected


def test_exact_match_without_reference_is_skipped() -> None:
    result = score("exact-match", {"completion": "x"})
    assert (result.status, result.reason) == ("skipped", "no reference")


def test_contains_text_param_or_reference() -> None:
    assert score("contains", {"completion": "the cat sat"}, text="cat").value is True
    assert score("contains", {"completion": "the cat sat"}, text=["dog", "sat"]).value is True
    assert score("contains", {"completion": "the CAT"}, text="cat").value is False
    assert score("contains", {"completion": "the CAT"}, text="cat", ignore_case=True).value is True
    assert score("contains", {"completion": "x = 7", "answer": 7}).value is True
    assert score("contains", {"completion": "x"}).status == "skipped"


def test_regex_modes_and_flags() -> None:
    assert score("regex", {"completion": "abc 123"}, pattern=r"\d+").value is True
    assert score("regex", {"completion": "abc 123"}, pattern=r"\d+", mode="match").value is False
    assert score("regex", {"completion": "123"}, pattern=r"\d+", mode="fullmatch").value is True
    assert score("regex", {"completion": "A\nb"}, pattern="a.b", ignore_case=True, dotall=True).value is True
    with pytest.raises(ValidationError, match="not a valid regular expression"):
        get_evaluator("regex").parse_params({"pattern": "("})


SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def test_json_schema() -> None:
    assert score("json-schema", {"completion": '{"n": 3}'}, schema=SCHEMA).value is True
    fenced = 'Here:\n```json\n{"n": 3}\n```\nthanks'
    assert score("json-schema", {"completion": fenced}, schema=SCHEMA).value is True
    wrong = score("json-schema", {"completion": '{"n": "3"}'}, schema=SCHEMA)
    assert wrong.value is False and "at n:" in (wrong.reason or "")
    broken = score("json-schema", {"completion": '{"n": '}, schema=SCHEMA)
    assert broken.value is False and "not valid JSON" in (broken.reason or "")
    assert score("json-schema", {"completion": '{"n": 3}'}, schema=SCHEMA, extract="fenced").value is False
    with pytest.raises(ValidationError, match="not a valid JSON Schema"):
        get_evaluator("json-schema").parse_params({"schema": {"type": "nonsense"}})


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<think>reasoning</think><answer>4</answer>", True),
        ("<think>a\nb</think>\n<answer>4</answer>\n", True),
        ("<answer>4</answer>", False),
        ("<think>x</think><answer>4</answer> trailing text", False),
        ("<think>x</think>", False),
    ],
)
def test_format_check_default_pattern(completion: str, expected: bool) -> None:
    assert score("format-check", {"completion": completion}).value is expected


def test_format_check_unique_tags() -> None:
    twice = "<think>a</think><answer>1</answer><answer>2</answer>"
    assert score("format-check", {"completion": twice}).value is True
    result = score("format-check", {"completion": twice}, unique_tags=["think", "answer"])
    assert result.value is False
    assert result.reason == "<answer> appears 2 times; it must appear exactly once"
    with pytest.raises(ValidationError, match="bare tag names"):
        get_evaluator("format-check").parse_params({"unique_tags": ["<answer>"]})


def test_format_check_reads_chat_completions() -> None:
    chat = [{"role": "assistant", "content": "<think>t</think><answer>a</answer>"}]
    assert score("format-check", {"completion": chat}).value is True


@pytest.mark.parametrize(
    ("length", "expected"),
    [(0, 0.0), (16384, 0.0), (16385, -1 / 4096), (18432, -0.5), (20480, -1.0), (30000, -1.0)],
)
def test_overlong_penalty_is_dapo_soft_penalty(length: int, expected: float) -> None:
    assert overlong_penalty(length, 20480, 4096) == pytest.approx(expected)
    assert score("overlong-penalty", {"completion": "x", "completion_tokens": length}).value == pytest.approx(expected)


def test_overlong_penalty_uses_completion_ids_and_skips_without_counts() -> None:
    assert (
        score("overlong-penalty", {"completion": "x", "completion_ids": [0] * 15}, max_length=20, buffer=10).value
        == -0.5
    )
    assert score("overlong-penalty", {"completion": "x"}).status == "skipped"
    with pytest.raises(ValidationError, match="must not exceed max_length"):
        get_evaluator("overlong-penalty").parse_params({"max_length": 10, "buffer": 20})


def test_field_score_forms() -> None:
    assert score("field-score", {"completion": "", "r": 0.5}, field="r").value == 0.5
    assert score("field-score", {"completion": "", "r": True}, field="r").value is True
    assert score("field-score", {"completion": ""}, field="r").status == "skipped"
    assert score("field-score", {"completion": "", "r": {"status": "error", "reason": "x"}}, field="r").reason == "x"
    assert score("field-score", {"completion": "", "r": "high"}, field="r").status == "error"


@pytest.mark.parametrize("name", ["exact-match", "contains"])
def test_gold_answers_get_full_marks(name: str) -> None:
    for gold in ["42", "Paris", "x^2 + 1"]:
        assert score(name, {"completion": gold, "answer": gold}).value is True
