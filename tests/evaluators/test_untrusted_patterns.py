"""Spec patterns run on RE2: linear time on hostile patterns, capped sizes, refused features named, opt-in re."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from evalsi.errors import SpecError
from evalsi.evaluators import Score, ScoreContext, get_evaluator, use_python_regex
from evalsi.evaluators._patterns import MAX_PATTERN_CHARS, MAX_TEXT_CHARS, _cache, compile_pattern
from evalsi.evaluators.judge._config import NumberVerdict
from evalsi.evaluators.judge._verdict import parse_verdict
from evalsi.records import from_rollout
from evalsi.rewards import from_mapping

EVIL = "(a+)+$"
"""Exponential on Python's re: 30 characters of ``a`` and a ``b`` take seconds, each more doubles it."""
EVIL_TEXT = "a" * 5000 + "b"


def score(name: str, completion: str, **params: Any) -> Score:
    evaluator = get_evaluator(name)
    parsed = evaluator.parse_params(params)
    return evaluator.score_batch([from_rollout({"completion": completion})], parsed, ScoreContext())[0]


@pytest.fixture
def python_regex() -> Iterator[None]:
    previous = use_python_regex(True)
    yield
    use_python_regex(previous)


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        ("regex", {"pattern": EVIL}, False),
        ("regex", {"pattern": EVIL, "mode": "fullmatch"}, False),
        ("regex", {"pattern": "(x+x+)+y", "ignore_case": True}, False),
        ("format-check", {"pattern": EVIL}, False),
        ("format-check", {"pattern": "(a|aa)+$"}, False),
        ("json-schema", {"schema": {"type": "string", "pattern": EVIL}}, False),
    ],
)
def test_catastrophic_patterns_answer_at_once(name: str, params: dict[str, Any], expected: bool) -> None:
    completion = f'"{EVIL_TEXT}"' if name == "json-schema" else EVIL_TEXT
    started = time.perf_counter()
    result = score(name, completion, **params)
    assert result.status == "ok" and result.value is expected
    assert time.perf_counter() - started < 2.0  # Python's re would not finish in the lifetime of the machine


def test_pattern_properties_and_additional_properties_match_in_linear_time() -> None:
    schema = {"type": "object", "patternProperties": {EVIL: {"type": "integer"}}, "additionalProperties": False}
    started = time.perf_counter()
    result = score("json-schema", '{"' + EVIL_TEXT + '": 1, "aaa": "x"}', schema=schema)
    assert result.status == "ok" and result.value is False
    assert "additional properties are not allowed" in (result.reason or "")
    assert time.perf_counter() - started < 2.0
    assert score("json-schema", '{"aaa": 1}', schema=schema).value is True
    assert score("json-schema", '{"aaa": "x"}', schema=schema).value is False


def test_a_judge_verdict_pattern_runs_on_re2() -> None:
    verdict = NumberVerdict(pattern=r"(?:a+)+$|Score: (\d+)")
    started = time.perf_counter()
    assert parse_verdict(EVIL_TEXT + "\nScore: 7", verdict)[0] == pytest.approx(0.7)
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize(
    ("pattern", "feature"),
    [
        (r"(a)\1", "backreference"),
        (r"(?P<x>a)(?P=x)", "backreference"),
        (r"foo(?=bar)", "lookahead"),
        (r"(?<!x)y", "lookbehind"),
        (r"(?>a+)b", "atomic group"),
        (r"a++", "possessive"),
    ],
)
def test_unsupported_features_are_spec_errors_naming_the_field(pattern: str, feature: str) -> None:
    for ref in ("regex", "format-check"):
        with pytest.raises(SpecError) as caught:
            from_mapping({"components": [{"ref": ref, "params": {"pattern": pattern}}]})
        message = str(caught.value)
        assert "params.pattern" in message and feature in message and "RE2" in message
    with pytest.raises(SpecError, match="pattern at #/properties/s"):
        schema = {"properties": {"s": {"type": "string", "pattern": pattern}}}
        from_mapping({"components": [{"ref": "json-schema", "params": {"schema": schema}}]})
    with pytest.raises(ValidationError, match=feature):
        NumberVerdict(pattern=f"({pattern})")


def test_in_process_callers_may_opt_in_to_pythons_re(python_regex: None) -> None:
    assert score("regex", "abab", pattern=r"(ab)\1").value is True
    assert score("format-check", "foobar", pattern=r"foo(?=bar).*").value is True
    assert score("json-schema", '"aa"', schema={"pattern": r"^(a)\1$"}).value is True


def test_re2_semantics_that_differ_from_python_re_are_as_documented() -> None:
    # \d and \w are ASCII-only; Unicode classes say so explicitly.
    assert score("regex", "١٢٣", pattern=r"^\d+$").value is False
    assert score("regex", "١٢٣", pattern=r"^\pN+$").value is True
    assert score("regex", "héllo", pattern=r"^\w+$").value is False
    assert score("regex", "héllo", pattern=r"^\pL+$").value is True
    # $ matches only at the very end without multiline.
    assert score("regex", "abc\n", pattern=r"abc$").value is False
    assert score("regex", "abc\n", pattern=r"abc$", multiline=True).value is True


def test_pattern_and_text_lengths_are_capped() -> None:
    with pytest.raises(SpecError, match=f"at most {MAX_PATTERN_CHARS:,}"):
        from_mapping({"components": [{"ref": "regex", "params": {"pattern": "a" * (MAX_PATTERN_CHARS + 1)}}]})
    with pytest.raises(SpecError, match="counted repeats are capped"):
        from_mapping({"components": [{"ref": "regex", "params": {"pattern": "a{5000}"}}]})
    huge = "a" * (MAX_TEXT_CHARS + 1)
    for name in ("regex", "format-check"):
        result = score(name, huge, pattern="a+")
        assert result.status == "error" and f"at most {MAX_TEXT_CHARS:,}" in (result.reason or "")
    long_string = score("json-schema", f'"{huge}"', schema={"type": "string", "pattern": "a+"})
    assert long_string.value is False and "cannot match pattern" in (long_string.reason or "")


def test_the_compiled_pattern_cache_is_bounded_by_bytes() -> None:
    for i in range(300):
        compile_pattern(f"(?:x{i})" + "[a-z]" * 500)
    assert _cache.bytes <= _cache.max_bytes
    assert len(_cache) < 300


@pytest.mark.parametrize("text", ["answer" + " " * 200_000 + "x", "The answer is" + " " * 200_000 + "?"])
def test_built_in_answer_patterns_read_hostile_whitespace_in_linear_time(text: str) -> None:
    evaluator = get_evaluator("multiple-choice")
    parsed = evaluator.parse_params({})

    def choose(completion: str) -> Score:
        record = from_rollout({"completion": completion, "answer": "C"})
        return evaluator.score_batch([record], parsed, ScoreContext())[0]

    started = time.perf_counter()
    result = choose(text)
    assert result.status == "ok" and result.value is False
    assert time.perf_counter() - started < 2.0  # quadratic before: 20 s for 20,000 spaces
    for kept in ("The answer is: \\text{C}", "Answer:  **C**", "the answer is (C)", "Answer is C."):
        assert choose(kept).value is True, kept
