"""On the cases the fast path decides, its verdict agrees with math-verify's ``verify(parse(gold), parse(pred))``.

Every intentional difference is listed in ``DIFFERENCES`` with the reason, and asserted both ways, so a change in
either side shows up here. The gold is given to math-verify as ``\\boxed{gold}`` (as verl and open-r1 do, so
that LaTeX golds are read as LaTeX); the prediction is the whole completion, as math-verify is meant to be used.
"""

from __future__ import annotations

import pytest

from evalsi.evaluators import ScoreContext
from evalsi.evaluators.rl.math_equiv import MathEquiv
from evalsi.records import Record

math_verify = pytest.importorskip("math_verify", reason="math-verify is part of evalsi[math]")

pytestmark = pytest.mark.timeout(120)

AGREEMENT: list[tuple[str, str]] = [
    ("72", "Natalia sold 48+24 = 72 clips.\n#### 72"),
    ("72", "So she sold 71 clips.\n#### 71"),
    ("18", "Therefore, the final answer is $\\boxed{18}$."),
    ("18", "She makes $\\boxed{\\$18.00}$ every day."),
    ("18", "Therefore, the final answer is $\\boxed{19}$."),
    ("1234", "The total is \\boxed{1,234}."),
    ("1234", "The total is \\boxed{1,243}."),
    ("1000000", "That is \\boxed{1,000,000} dollars."),
    ("0.75", "The probability is $\\boxed{\\dfrac{3}{4}}$."),
    ("\\frac{3}{4}", "The probability is $\\boxed{0.75}$."),
    ("\\frac{3}{4}", "The probability is $\\boxed{\\frac{6}{8}}$."),
    ("\\frac{3}{4}", "The probability is $\\boxed{\\frac{4}{3}}$."),
    ("\\frac{1}{3}", "\\boxed{0.333333}"),
    ("\\frac{1}{3}", "\\boxed{0.3333}"),
    ("-\\frac{1}{2}", "The slope is $\\boxed{-\\frac{1}{2}}$."),
    ("-\\frac{1}{2}", "The slope is $\\boxed{\\frac{1}{2}}$."),
    ("-5", "\\boxed{-5}"),
    ("-5", "\\boxed{5}"),
    ("25", "The discount is \\boxed{25\\%}."),
    ("0.25", "The discount is \\boxed{25\\%}."),
    ("25\\%", "The discount is \\boxed{0.25}."),
    ("25\\%", "The discount is \\boxed{25}."),
    ("25\\%", "The discount is \\boxed{30\\%}."),
    ("12", "\\boxed{12.0}"),
    ("12", "\\boxed{12.0000004}"),
    ("0.001", "\\boxed{10^{-3}}"),
    ("1024", "There are $\\boxed{2^{10}}$ subsets."),
    ("1500", "\\boxed{1.5 \\times 10^{3}}"),
    ("30", "So the angle is $\\boxed{30^\\circ}$."),
    ("5", "The side is \\boxed{5\\text{ cm}}."),
    ("5", "Solving, $\\boxed{x = 5}$."),
    ("(1,2)", "\\boxed{(1,2)}"),
    ("(1,2)", "\\boxed{[1,2]}"),
    ("(1,2]", "\\boxed{(1,2]}"),
    ("(1,2]", "\\boxed{(1,2)}"),
    ("(-\\infty,3]", "$x \\in \\boxed{(-\\infty, 3]}$"),
    ("(-\\infty,3]", "$x \\in \\boxed{(-\\infty, 3)}$"),
    ("\\{-2,3\\}", "The roots are \\boxed{\\{3, -2\\}}."),
    ("\\{-2,3\\}", "The roots are \\boxed{\\{3, 2\\}}."),
    ("(2,-1,4)", "The point is \\boxed{(2, -1, 4)}."),
    ("(2,-1,4)", "The point is \\boxed{(4, -1, 2)}."),
    ("\\frac{\\sqrt{3}}{2}", "Thus $\\sin 60^\\circ = \\boxed{\\frac{\\sqrt3}{2}}$."),
    ("x^2-1", "Expanding, \\boxed{x^2 - 1}."),
    ("\\text{Evelyn}", "The winner is \\boxed{\\text{Evelyn}}."),
    ("7", "Adding them up: 3 + 4 = 7"),
    ("3", "She has 3 apples left"),
    ("12", "Multiplying, the answer is 12."),
    ("5", "Final Answer: The final answer is $5$. I hope it is correct."),
    ("1000.5", "The total cost is \\boxed{\\$1,000.50}."),
]

DIFFERENCES: list[tuple[str, str, bool, bool, str]] = [
    (
        "0.1",
        "\\boxed{0.10000001}",
        False,
        True,
        "decimals compare by significant digits; math-verify rounds both to 6 decimals",
    ),
    (
        "1500",
        "\\boxed{1.5e3}",
        True,
        False,
        "math-equiv reads scientific notation; math-verify reads 1.5e3 as 1.5 - e*3",
    ),
    (
        "50\\%",
        "\\boxed{50.0}",
        True,
        False,
        "p% equals p as written, however it is written; math-verify accepts 50 but not 50.0",
    ),
    (
        "4",
        "The first step gives 3.\n#### 4\nCheck: 2 + 2 = 4, not 3",
        True,
        False,
        "#### x is a final-answer marker in math-equiv's order; math-verify takes the last number",
    ),
]


def our_verdict(evaluator: MathEquiv, gold: str, completion: str) -> tuple[bool | float | None, str]:
    params = evaluator.parse_params({"backend": "none"})
    result = evaluator.score(Record(completion=completion, reference=gold), params, ScoreContext())
    return result.value, (result.details or {}).get("method", "")


def math_verify_verdict(gold: str, completion: str) -> bool:
    return bool(math_verify.verify(math_verify.parse("\\boxed{" + gold + "}"), math_verify.parse(completion)))


@pytest.fixture(scope="module")
def evaluator() -> MathEquiv:
    return MathEquiv()


def test_fast_path_agrees_with_math_verify_on_every_decided_case(evaluator: MathEquiv) -> None:
    decided = disagreements = 0
    report = []
    for gold, completion in AGREEMENT:
        ours, method = our_verdict(evaluator, gold, completion)
        if method not in ("same text", "numeric") and not method.startswith("as "):  # "as sets", "as tuples"...
            continue
        decided += 1
        theirs = math_verify_verdict(gold, completion)
        if ours != theirs:
            disagreements += 1
            report.append((gold, completion, ours, theirs))
    assert report == []
    assert decided == len(AGREEMENT)  # the table is about what the fast path decides


@pytest.mark.parametrize(
    ("gold", "completion", "ours", "theirs", "why"), DIFFERENCES, ids=[d[4][:40] for d in DIFFERENCES]
)
def test_documented_differences(
    evaluator: MathEquiv, gold: str, completion: str, ours: bool, theirs: bool, why: str
) -> None:
    assert our_verdict(evaluator, gold, completion)[0] is ours
    assert math_verify_verdict(gold, completion) is theirs
