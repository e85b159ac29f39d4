"""One positive and one hard negative (at least) for every failure class math-equiv decides, scored as a batch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evalsi.evaluators import ScoreContext
from evalsi.evaluators.rl.math_equiv import MathEquiv
from evalsi.records import Record

pytest.importorskip("math_verify", reason="math-verify is part of evalsi[math]")

LOOP = "Wait, let me recompute the sum of the remaining terms once more. " * 40
RECURRENCE = "$F_n = \\sum_{k=0}^{n-1} F_k F_{n-k-1}$"

CASES: list[tuple[str, str, str, bool]] = [
    # (class, gold, completion, label)
    ("sig-digits", "6.12\\times10^{-8}", "\\boxed{6.17\\times10^{-8}}", False),
    ("sig-digits", "6.12\\times10^{-8}", "\\boxed{6.12e-8}", True),
    ("sig-digits", "\\frac{1}{7}", "\\boxed{0.142857}", True),
    ("sig-digits", "3.14159", "\\boxed{3.14158}", False),
    ("exact-huge", "3^{-120}", "\\boxed{3^{-121}}", False),
    ("exact-huge", "\\frac{1}{1999!}", "\\boxed{\\frac{1}{1998!}}", False),
    ("exact-huge", "\\frac{5^{900}-1}{5^{901}}", "\\boxed{\\frac{1}{5^{901}}}", False),
    ("exact-huge", "2^{100}", f"\\boxed{{{2**100 + 1}}}", False),
    ("exact-huge", "2^{100}", f"\\boxed{{{2**100}}}", True),
    ("free-symbols", "\\frac{9}{2}", "\\boxed{\\frac{9}{2}t}", False),
    ("free-symbols", "\\frac{9}{2}t", "\\boxed{4.5t}", True),
    ("suffix-words", "7 \\text{ a.m.}", "\\boxed{7 \\text{ p.m.}}", False),
    ("suffix-words", "7 \\text{ a.m.}", "\\boxed{7\\text{ am}}", True),
    ("suffix-words", "3 \\text{ hours}", "\\boxed{3 \\text{ minutes}}", False),
    ("suffix-words", "2 \\text{ million}", "\\boxed{2}", False),
    ("truncated", "42", "First \\boxed{42} in a small case. The final answer is \\boxed{4", False),
    ("truncated", "42", "Adding gives 42.\n\nTherefore, the final answer is", False),
    ("truncated", "42", "Let us count. " + LOOP + "Wait, let me recompute the sum of 42", False),
    ("truncated", "42", "Adding gives 42, so the final answer is \\boxed{42}.", True),
    ("multi-box", "4, -5", "The roots are $\\boxed{4}, \\boxed{-5}$.", True),
    ("multi-box", "(1,3),(3,1)", "$\\boxed{(1,3)} \\text{ and } \\boxed{(3,1)}$", True),
    ("multi-box", "4", "It is either $\\boxed{4}$ or $\\boxed{-5}$.", False),
    ("multi-box", "4, -5", "The root is $\\boxed{4}$.", False),
    ("answer-sentence", "12", "Final Answer: The smallest k is 12.", True),
    ("answer-sentence", "41", "The answer is: **41**", True),
    ("answer-sentence", "12", "The answer is not 12; it is 15.", False),
    ("thousands-vs-tuple", "12350", "\\boxed{12,350}", True),
    ("thousands-vs-tuple", "3,-4", "\\boxed{3,-4}", True),
    ("thousands-vs-tuple", "34", "\\boxed{3,4}", False),
    ("spellings", "\\frac{\\pi}{3}", "\\boxed{pi/3}", True),
    ("spellings", "e^2+1", "\\boxed{exp(2) + 1}", True),
    ("spellings", "-1+3i", "\\boxed{i(3+i)}", True),
    ("spellings", "2-3i", "\\boxed{2.0 + -3.0i}", True),
    ("spellings", "\\emptyset", "\\boxed{\\varnothing}", True),
    ("spellings", "1", "\\boxed{e^{\\pi i}}", False),
    ("equations", "g(t) = 4t - 1", "\\boxed{y = 4t - 1}", True),
    ("equations", "a = 3, b = 7", "\\boxed{b=7, a=3}", True),
    ("equations", "a = 3, b = 7", "\\boxed{a=7,b=3}", False),
    ("equations", "2,-2", "$\\boxed{x = 2 \\text{ or } x = -2}$", True),
    ("equations", "y = 2x+3", "\\boxed{y-2x=3}", True),
    ("intervals", "(-1, \\infty)", "\\boxed{x > -1}", True),
    ("intervals", "(0, 5]", "\\boxed{0 < x \\le 5}", True),
    ("intervals", "(0, 5]", "\\boxed{0 \\le x \\le 5}", False),
    ("intervals", "(-\\infty, \\sqrt{3}]", "\\boxed{t \\leq \\sqrt{3}}", True),
    ("units", "36", "\\boxed{36 \\text{ m}^2}", True),
    ("units", "15:20", "\\boxed{3:20 \\text{ PM}}", True),
    ("units", "15:20", "\\boxed{3:20 \\text{ AM}}", False),
    ("expressions", "784", "\\boxed{2^4 7^2}", True),
    ("expressions", "783", "\\boxed{2^4 7^2}", False),
    (
        "expressions",
        "\\begin{pmatrix}6 & 8 \\\\ 10 & 12\\end{pmatrix}",
        "\\boxed{\\begin{pmatrix}1 & 2 \\\\ 3 & 4\\end{pmatrix} + \\begin{pmatrix}5 & 6 \\\\ 7 & 8\\end{pmatrix}}",
        True,
    ),
    ("symbolic-slow", "\\cosh(bx)", "\\boxed{\\frac{e^{bx}+e^{-bx}}{2}}", True),
    ("symbolic-slow", "\\cosh(bx)", "\\boxed{\\frac{e^{bx}-e^{-bx}}{2}}", False),
    ("symbolic-slow", "(x+1)(x+2)(x+3)", "\\boxed{(x+3)(x+1)(x+2)}", True),
    ("equation-sides", "\\sin(x)=\\frac{42}{59}", "\\boxed{\\cos(x)=\\frac{42}{59}}", False),
    ("equation-sides", "\\sin(x)=\\frac{42}{59}", "\\boxed{\\sin x=\\frac{42}{59}}", True),
    ("equation-sides", "y=3", "\\boxed{x=3}", False),
    ("equation-sides", "x=3", "\\boxed{3}", True),
    ("equation-sides", "3", "\\boxed{x = 3}", True),
    ("equation-sides", "x=3", "\\boxed{2x=6}", True),
    ("equation-sides", "x=3", "\\boxed{x^2=9}", False),
    ("bound-indices", RECURRENCE, "\\boxed{F_n=\\sum_{k=0}^{n-2}F_kF_{n-k-2}}", False),
    ("bound-indices", RECURRENCE, "\\boxed{F_n=\\sum_{k=0}^{n-1}F_{n-k-1}F_k}", True),
    ("bound-indices", "\\sum_{k=1}^{n}k^2", "\\boxed{\\frac{n(n+1)(2n-1)}{6}}", False),
    ("bound-indices", "\\sum_{k=1}^{n}k^2", "\\boxed{\\frac{n(n+1)(2n+1)}{6}}", True),
    ("log-base", "3", "\\boxed{\\log_2 8}", True),
    ("log-base", "16", "\\boxed{\\log_2 8}", False),
    (
        "matrix-entries",
        "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
        "\\boxed{\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}}",
        True,
    ),
    (
        "matrix-entries",
        "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
        "\\boxed{\\begin{pmatrix}2&2\\\\3&4\\end{pmatrix}}",
        False,
    ),
    ("mixed-numbers", "1 1/2", "\\boxed{\\frac{3}{2}}", True),
    ("mixed-numbers", "2 3/4", "\\boxed{\\frac{3}{2}}", False),
    ("mixed-numbers", "2 1/3 cups", "\\boxed{\\frac{7}{3}}", True),
    ("mixed-numbers", "1 1/2 hours", "\\boxed{1.5 \\text{ minutes}}", False),
    ("conjunctions", "100 or 200", "\\boxed{100, 200}", True),
    ("conjunctions", "100 or 200", "\\boxed{100200}", False),
    ("conjunctions", "100200", "$\\boxed{100}$ and $\\boxed{200}$", False),
]


@pytest.fixture(scope="module")
def math_equiv() -> Iterator[MathEquiv]:
    evaluator = MathEquiv()
    yield evaluator
    evaluator.close()


@pytest.mark.timeout(300)
def test_every_class_positive_and_hard_negative(math_equiv: MathEquiv) -> None:
    records = [Record(completion=completion, reference=gold) for _, gold, completion, _ in CASES]
    scores = math_equiv.score_batch(records, math_equiv.parse_params({"timeout": 20}), ScoreContext())
    wrong = [(case, score.reason) for case, score in zip(CASES, scores, strict=True) if score.value is not case[3]]
    assert wrong == []


@pytest.mark.timeout(120)
def test_symbolic_items_are_decided_before_simplification(math_equiv: MathEquiv) -> None:
    scores = math_equiv.score_batch(
        [
            Record(completion="\\boxed{\\frac{e^{bx}+e^{-bx}}{2}}", reference="\\cosh(bx)"),
            Record(completion="\\boxed{\\frac{1}{1998!}}", reference="\\frac{1}{1999!}"),
        ],
        math_equiv.parse_params({"timeout": 20}),
        ScoreContext(),
    )
    assert scores[0].details is not None and scores[0].details["method"] == "equal at random points"
    assert scores[1].details is not None and scores[1].details["method"] == "exact"


@pytest.mark.timeout(120)
def test_the_method_names_the_stage_that_decided(math_equiv: MathEquiv) -> None:
    scores = math_equiv.score_batch(
        [
            Record(completion="\\boxed{F_n=\\sum_{k=0}^{n-2}F_kF_{n-k-2}}", reference=RECURRENCE),
            Record(completion="\\boxed{\\cos(x)=\\frac{42}{59}}", reference="\\sin(x)=\\frac{42}{59}"),
            Record(completion="\\boxed{x=3}", reference="y=3"),
            Record(completion="$\\boxed{4}, \\boxed{0.5}$", reference="\\frac{1}{2} and 4"),
        ],
        math_equiv.parse_params({"timeout": 20}),
        ScoreContext(),
    )
    methods = [(score.value, (score.details or {}).get("method")) for score in scores]
    assert methods == [
        (False, "differs at random points"),  # the sums, at integer points: never a fallback's "equal"
        (False, "different equations (random points)"),
        (False, "different variables (y and x)"),
        (True, "list of answers (numeric, same text)"),  # each item's own way, in the reference's order
    ]


def test_hedging_and_cut_off_reasons(math_equiv: MathEquiv) -> None:
    params = math_equiv.parse_params({})
    hedge = math_equiv.score(Record(completion="$\\boxed{3}, \\boxed{4}$", reference="4"), params, ScoreContext())
    assert hedge.value is False and "several answers against one reference" in (hedge.reason or "")
    cut = math_equiv.score(Record(completion="so \\boxed{4} then \\boxed{", reference="4"), params, ScoreContext())
    assert cut.value is False and "cut off" in (cut.reason or "")


def test_significant_digits_param(math_equiv: MathEquiv) -> None:
    loose = math_equiv.parse_params({"significant_digits": 4})
    strict = math_equiv.parse_params({})
    record = Record(completion="\\boxed{0.3333}", reference="\\frac{1}{3}")
    assert math_equiv.score(record, loose, ScoreContext()).value is True
    assert math_equiv.score(record, strict, ScoreContext()).value is False
