"""math-equiv as an evaluator: the regression table, params, memo, backends, and the reward path."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import evalsi.rewards
from evalsi.errors import SpecError
from evalsi.evaluators import Score, ScoreContext, get_evaluator
from evalsi.evaluators.rl.math_equiv import MathEquiv, MathEquivParams
from evalsi.evaluators.rl.math_equiv._symbolic import latex_to_python, refutation
from evalsi.records import Record, from_rollout

pytestmark = pytest.mark.timeout(120)

CASES = json.loads((Path(__file__).parent / "math_cases.json").read_text())["cases"]
CTX = ScoreContext(component="math")


@pytest.fixture(scope="module")
def math_equiv() -> Iterator[MathEquiv]:
    evaluator = get_evaluator("math-equiv")
    assert isinstance(evaluator, MathEquiv)
    yield evaluator
    evaluator.close()


def score(evaluator: MathEquiv, completion: Any, reference: Any, **params: Any) -> Score:
    record = from_rollout({"completion": completion, "reference": reference})
    return evaluator.score(record, evaluator.parse_params(params), CTX)


def test_registered_with_the_contracted_attributes() -> None:
    cls = type(get_evaluator("math-equiv"))
    assert (cls.name, cls.pack, cls.reads) == ("math-equiv", "rl", ("completion", "reference"))
    assert cls.params_model is MathEquivParams


def test_regression_table_scored_as_one_batch(math_equiv: MathEquiv) -> None:
    records = [from_rollout({"completion": c["completion"], "reference": c["reference"]}) for c in CASES]
    scores = math_equiv.score_batch(records, math_equiv.parse_params({}), CTX)
    wrong = [(c["why"], s.reason) for c, s in zip(CASES, scores, strict=True) if s.value is not c["expected"]]
    assert wrong == []
    assert all(s.status == "ok" for s in scores)


@pytest.mark.parametrize("case", CASES, ids=[c["why"][:50] for c in CASES])
def test_regression_table_one_by_one(math_equiv: MathEquiv, case: dict[str, Any]) -> None:
    assert score(math_equiv, case["completion"], case["reference"]).value is case["expected"]


def test_gold_data_gets_full_marks(math_equiv: MathEquiv) -> None:
    for case in CASES:
        reference = case["reference"]
        gold = reference[0] if isinstance(reference, list) else reference
        assert score(math_equiv, f"The answer is $\\boxed{{{gold}}}$.", reference).value is True, gold


def test_no_reference_is_skipped_and_no_answer_scores_zero(math_equiv: MathEquiv) -> None:
    skipped = score(math_equiv, "\\boxed{1}", None)
    assert skipped.status == "skipped" and skipped.value is None
    assert score(math_equiv, "\\boxed{1}", "   ").status == "skipped"
    nothing = score(math_equiv, "I cannot solve this.", "5")
    assert (nothing.status, nothing.value) == ("ok", False)
    assert "no final answer" in (nothing.reason or "")
    assert score(math_equiv, "it is 5", "5", last_number=False).value is False


def test_reason_and_details_say_what_was_extracted_and_how(math_equiv: MathEquiv) -> None:
    result = score(math_equiv, "so \\boxed{\\dfrac{1}{2}}", "0.5")
    assert result.value is True
    assert result.details is not None
    assert result.details["extracted"] == "\\dfrac{1}{2}"
    assert result.details["source"] == "boxed"
    assert result.details["normalised"] == "\\frac{1}{2}"
    assert result.details["method"] == "numeric"
    assert "from \\boxed{}" in (result.reason or "")
    grouped = score(math_equiv, "\\boxed{\\{2, 1\\}}", "\\{1, 2\\}")
    assert grouped.value is True and grouped.details is not None and grouped.details["method"] == "as sets"
    assert (grouped.reason or "").endswith("(as sets)") and "numeric" not in (grouped.reason or "")
    symbolic = score(math_equiv, "\\boxed{2\\sqrt{2}}", "\\sqrt{8}")
    assert symbolic.value is True and symbolic.details is not None and symbolic.details["method"] == "exact (40 digits)"


def test_params_change_verdicts(math_equiv: MathEquiv) -> None:
    assert score(math_equiv, "\\boxed{50\\%}", "50").value is True
    assert score(math_equiv, "\\boxed{50\\%}", "50", percent="strict").value is False
    assert score(math_equiv, "\\boxed{50\\%}", "0.5", percent="strict").value is True
    assert score(math_equiv, "\\boxed{3.1416}", "3.14159").value is False
    assert score(math_equiv, "\\boxed{3.1416}", "3.14159", rel_tol=1e-4).value is True
    assert score(math_equiv, "\\boxed{0.3333}", "\\frac{1}{3}").value is False
    assert score(math_equiv, "\\boxed{0.3333}", "\\frac{1}{3}", significant_digits=4).value is True


def test_unknown_or_invalid_params_are_errors() -> None:
    with pytest.raises(ValidationError):
        MathEquivParams.model_validate({"timout": 1})
    with pytest.raises(ValidationError):
        MathEquivParams.model_validate({"backend": "mathematica"})
    with pytest.raises(ValidationError):
        MathEquivParams.model_validate({"timeout": 0})


def test_backend_none_compares_text_and_numbers_only(math_equiv: MathEquiv) -> None:
    assert score(math_equiv, "\\boxed{\\frac{1}{2}}", "0.5", backend="none").value is True
    assert score(math_equiv, "\\boxed{x^2-1}", "x^2-1", backend="none").value is True
    undecided = score(math_equiv, "\\boxed{2\\sqrt{2}}", "\\sqrt{8}", backend="none")
    assert undecided.value is False
    assert "no symbolic backend" in (undecided.reason or "")


def test_sympy_backend(math_equiv: MathEquiv) -> None:
    assert score(math_equiv, "\\boxed{2\\sqrt{2}}", "\\sqrt{8}", backend="sympy").value is True
    assert score(math_equiv, "\\boxed{(x-1)(x+1)}", "x^2-1", backend="sympy").value is True
    assert score(math_equiv, "\\boxed{\\frac{\\pi}{2}}", "\\frac{2\\pi}{4}", backend="sympy").value is True
    assert score(math_equiv, "\\boxed{x^2+1}", "x^2-1", backend="sympy").value is False


@pytest.mark.parametrize(
    "latex", ["__import__('os')", "exec(1)", "lambdify(x,x)", "x.__class__", "open(1)", "a[0]", "'s'"]
)
def test_sympy_translation_refuses_what_could_run_code(latex: str) -> None:
    assert latex_to_python(latex) is None


def test_latex_translation() -> None:
    assert latex_to_python("\\frac{\\sqrt{3}}{2}") == "((sqrt(3))/(2))"
    assert latex_to_python("x = 2^{10}") == " 2**(10)"


def test_a_backend_equal_on_symbols_is_overruled_where_random_points_differ() -> None:
    import sympy

    n, k, x = sympy.symbols("n k x")
    f = sympy.Function("F")
    assert refutation(sympy.Sum(k, (k, 1, n)), n * (n - 1) / 2, 6) == "differs at random points"
    assert refutation(sympy.Sum(k, (k, 1, n)), n * (n + 1) / 2, 6) is None
    shifted = sympy.Sum(f(k) * f(n - k - 2), (k, 0, n - 2))
    assert refutation(sympy.Sum(f(k) * f(n - k - 1), (k, 0, n - 1)), shifted, 6) == "differs at random points"
    assert refutation(sympy.Eq(sympy.cos(x), 1), sympy.Eq(sympy.sin(x), 1), 6) is not None
    assert refutation(sympy.Integer(2), sympy.Integer(3), 6) is None  # plain numbers are decided elsewhere


def test_memo_serves_repeated_answers_and_references_parse_once(math_equiv: MathEquiv) -> None:
    params = math_equiv.parse_params({"float_rounding": 5})  # a fresh judge for this test
    judge = math_equiv.judge(params)
    rollouts = [f"Attempt {i}: so the answer is \\boxed{{2\\sqrt{{2}}}}." for i in range(8)]
    rollouts += [f"Attempt {i}: \\boxed{{\\sqrt{{7}}}}" for i in range(4)]
    records = [Record(completion=text, reference="\\sqrt{8}") for text in rollouts]
    scores = math_equiv.score_batch(records, params, CTX)
    assert [s.value for s in scores] == [True] * 8 + [False] * 4
    assert len(judge.golds) == 1
    assert len(judge.memo) == 2  # two distinct (reference, answer) pairs went to the workers, once each
    again = math_equiv.score_batch(
        [Record(completion="Finally: $\\boxed{2\\sqrt{2}}$", reference="\\sqrt{8}")], params, CTX
    )
    assert again[0].value is True
    assert judge.memo.hits >= 1


def test_reward_path_from_mapping(math_equiv: MathEquiv) -> None:
    reward = evalsi.rewards.from_mapping(
        {"components": [{"ref": "math-equiv", "params": {"timeout": 2}}, {"ref": "format-check", "weight": 0.5}]}
    )
    rollouts = [
        {"prompt": "1+1?", "completion": "<think>easy</think><answer>2</answer>", "answer": "2"},
        {"prompt": "1+1?", "completion": "<think>hmm</think><answer>3</answer>", "answer": "2"},
        {"prompt": "half?", "completion": "\\boxed{\\frac{1}{2}}", "ground_truth": "0.5"},
        {"prompt": "none", "completion": "\\boxed{1}"},
    ]
    results = reward.score(rollouts)
    assert [r.total for r in results] == [1.5, 0.5, 1.0, 0.0]
    assert results[3].components["math-equiv"].status == "skipped"


def test_bad_param_in_a_spec_names_the_field() -> None:
    with pytest.raises(SpecError, match="params"):
        evalsi.rewards.from_mapping({"components": [{"ref": "math-equiv", "params": {"backend": "maple"}}]})


@pytest.mark.timeout(360)
def test_scoring_process_never_imports_sympy(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from evalsi.evaluators import ScoreContext, get_evaluator
        from evalsi.records import Record
        m = get_evaluator("math-equiv")
        params = m.parse_params({})
        records = [Record(completion=c, reference=r) for c, r in [
            ("#### 72", "72"), ("\\\\boxed{\\\\frac{1}{2}}", "0.5"), ("\\\\boxed{2\\\\sqrt{2}}", "\\\\sqrt{8}")]]
        print([s.value for s in m.score_batch(records, params, ScoreContext())])
        print(sorted(name for name in ("sympy", "math_verify", "latex2sympy2_extended") if name in sys.modules))
        m.close()
        """
    )
    # A fresh process starts its worker pool (imports and warm-up): minutes on a busy machine, not seconds.
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split("\n")[:2] == ["[True, True, True]", "[]"]
