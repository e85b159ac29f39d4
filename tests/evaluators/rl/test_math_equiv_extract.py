"""Extraction order, normalisation and the pure-Python fast path of math-equiv (no worker processes)."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from evalsi.evaluators.rl.math_equiv._compare import decide, named
from evalsi.evaluators.rl.math_equiv._extract import extract_answer, extract_reference, last_boxed
from evalsi.evaluators.rl.math_equiv._guard import huge_power, nesting_depth
from evalsi.evaluators.rl.math_equiv._normalise import normalise
from evalsi.evaluators.rl.math_equiv._numeric import Group, Num, Tolerance, equal, item_verdict, parse_value

TOL = Tolerance()


@pytest.mark.parametrize(
    ("text", "answer", "source"),
    [
        ("a \\boxed{1} b \\boxed{\\frac{1}{2}} c", "\\frac{1}{2}", "boxed"),
        ("\\fbox{7} then \\boxed{8}", "8", "boxed"),
        ("\\boxed{8} then \\fbox{7}", "7", "boxed"),
        ("<answer>4</answer> #### 5 \\boxed{6}", "6", "boxed"),
        ("<answer> 1 </answer> text <answer>4</answer> #### 5", "4", "answer-tag"),
        ("steps\n#### 5\n", "5", "####"),
        ("#### 5\nthe answer is 6", "5", "####"),
        ("#### $18. Done", "$18", "####"),
        ("So THE ANSWER IS 6, clearly. Later 7.", "6", "answer-is"),
        ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "\\frac{3}{4}", "answer-is"),
        ("the final answer: 3 hours", "3 hours", "answer-is"),
        ("we get 3, then 4.5 and finally -1,234.", "-1,234", "last-number"),
        ("ratio is 3/4", "3/4", "last-number"),
        ("so it is $\\dfrac{1}{3}$", "\\dfrac{1}{3}", "last-number"),
        ("about 50% of them", "50%", "last-number"),
        ("unbalanced \\boxed{\\frac{1}{2", "", "cut-off"),  # cut off mid-answer: no fallback
        ("\\boxed 5 apples", "5", "boxed"),
    ],
)
def test_extraction_follows_the_seed_order(text: str, answer: str, source: str) -> None:
    found = extract_answer(text)
    assert found is not None
    assert (found.text, found.source) == (answer, source)


def test_nothing_extractable_and_last_number_switch() -> None:
    assert extract_answer("no digits here") is None
    assert extract_answer("it is 5", last_number=False) is None
    assert extract_answer("\\boxed{}") is None


def test_boxed_with_escaped_and_nested_braces() -> None:
    assert last_boxed("\\boxed{\\{1, \\frac{2}{3}\\}}") == "\\{1, \\frac{2}{3}\\}"
    assert last_boxed("x" * 10 + "\\boxed{" + "{" * 3000 + "1" + "}" * 3000 + "}") == "{" * 3000 + "1" + "}" * 3000


def test_reference_extraction_keeps_a_bare_reference() -> None:
    assert extract_reference("  42 ").text == "42"
    assert extract_reference("x^2 - 1").text == "x^2 - 1"  # not the last number
    assert extract_reference("16 - 3 - 4 = <<16-3-4=9>>9\n#### 9").text == "9"
    assert extract_reference("so $\\boxed{\\frac{1}{2}}$").text == "\\frac{1}{2}"


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("1234", "1234"),
        ("$\\dfrac{1}{2}$", "\\frac{1}{2}"),
        ("\\tfrac12", "\\frac{1}{2}"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("30^\\circ", "30"),
        ("30^{\\circ}", "30"),
        ("\\$18.00", "18.00"),
        ("5\\text{ cm}", "5"),
        ("\\text{Evelyn}", "Evelyn"),
        ("1 \\text{ and } 2", "1;2"),  # a conjunction separates answers (a semicolon: never thousands)
        ("18 dollars", "18"),
        ("12 apples per day.", "12"),
        ("50\\%", "50%"),
        ("12{,}500", "12,500"),
        ("\\sqrt2", "\\sqrt{2}"),
        ("\\pi r^2", "\\pi r^2"),
        ("+7", "7"),
        ("−5", "-5"),
        ("x = 5.", "x=5"),
        ("100 or 200", "100;200"),  # two answers, never the number 100200
        ("\\log_2 8", "\\log_{2}8"),  # a logarithm's base and argument, not 2 times 8
        ("\\log_{10} 100", "\\log_{10}100"),
        ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
        ("1 1/2", "\\frac{3}{2}"),  # a mixed number
        ("-2 3/4", "-\\frac{11}{4}"),
        ("3\\frac{1}{3}", "\\frac{10}{3}"),
        ("2\\frac{5}{4}", "2\\frac{5}{4}"),  # an improper fraction after a number is a product
        ("2 1/3 cups", "\\frac{7}{3}"),  # a mixed number keeps its unit word apart
        ("\\frac{7}{3} cups", "\\frac{7}{3}"),
        ("3\\frac{1}{4} inches", "\\frac{13}{4}"),
        ("2^4 7^2", "2^4\\cdot7^2"),
    ],
)
def test_normalise(raw: str, canonical: str) -> None:
    assert normalise(raw) == canonical


@pytest.mark.parametrize(
    ("gold", "pred", "expected", "how"),
    [
        ("x=3", "y=3", False, "different variables (x and y)"),
        ("\\theta=\\frac{\\pi}{6}", "\\alpha=\\frac{\\pi}{6}", False, "different variables (\\theta and \\alpha)"),
        ("x=3", "3", True, "same text"),
        ("3", "x=3", True, "same text"),
        ("x=3", "x=3.0", True, "numeric"),
        ("g(t)=4t-1", "y=4t-1", True, "same text"),  # y names a function's value
        ("h(t)=5", "h=5", True, "same text"),
        ("a=1,b=2", "x=1,y=2", False, "list of answers: none matches 'a=1'"),
        ("a=3,b=7", "b=7,a=3", True, "named answers (same text)"),
        ("100;200", "100200", False, "one answer against a reference of 2"),
        ("1,000;2,000", "1000,2000", True, "list of answers (numeric)"),
    ],
)
def test_names_and_shapes_decide_with_how(gold: str, pred: str, expected: bool, how: str) -> None:
    assert decide(gold, pred, lambda g, p: item_verdict(g, p, TOL)) == (expected, how)


@pytest.mark.parametrize(
    ("item", "name", "value"),
    [
        ("x=5", "x", "5"),
        ("k=2+2=4", "k", "4"),
        ("F_n=\\sum_{k=0}^{n-1}F_kF_{n-k-1}", "F_n", "\\sum_{k=0}^{n-1}F_kF_{n-k-1}"),
        ("\\sum_{k=0}^{n-1}F_k", None, "\\sum_{k=0}^{n-1}F_k"),  # an = inside braces names nothing
        ("2x+4y-3=0", None, "2x+4y-3=0"),
        ("x<=3", None, "x<=3"),
    ],
)
def test_names_are_split_at_top_level_equals_signs(item: str, name: str | None, value: str) -> None:
    assert named(item) == (name, value)


def test_relations_with_other_left_sides_are_left_to_the_symbolic_stage() -> None:
    verdict = decide("\\sin(x)=\\frac{42}{59}", "\\cos(x)=\\frac{42}{59}", lambda g, p: item_verdict(g, p, TOL))
    assert verdict[0] is None  # compared whole, by the workers: never by the right side alone


@pytest.mark.parametrize(
    ("gold", "pred", "expected"),
    [
        ("1234", "1,234", True),
        ("1234", "1,234.0", True),
        ("0.5", "\\frac{1}{2}", True),
        ("0.5", "1/2", True),
        ("\\frac{-1}{2}", "-\\frac{1}{2}", True),
        ("1500", "1.5e3", True),
        ("1500", "1.5\\times10^{3}", True),
        ("0.001", "10^{-3}", True),
        ("1024", "2^{10}", True),
        ("50%", "0.5", True),
        ("50%", "50", True),
        ("50", "50%", True),
        ("50", "5000%", True),  # 5000% is 50; math-verify agrees
        ("\\frac{1}{3}", "0.333333", True),
        ("\\frac{1}{3}", "0.3333", False),
        ("12", "12.0000004", False),
        ("12", "12.0", True),
        ("0.1", "0.10000001", False),  # 0.1 has one significant digit: compared exactly
        ("5", "x=5", True),
        ("(1,2)", "(1,2)", True),
        ("(1,2)", "[1,2]", False),
        ("(1,2]", "(1,2)", False),
        ("[1,2)", "[1,2)", True),
        ("(-\\infty,3]", "(-\\infty,3]", True),
        ("(-\\infty,3]", "(-\\infty,3)", False),
        ("\\{1,2\\}", "\\{2,1\\}", True),
        ("\\{1,2\\}", "\\{2,1,1\\}", True),
        ("\\{1,2\\}", "\\{1,3\\}", False),
        ("(1,2,3)", "(1,2,3)", True),
        ("(1,2,3)", "(3,2,1)", False),
        ("(1,2,3)", "(1,2)", False),
    ],
)
def test_fast_path_decides(gold: str, pred: str, expected: bool) -> None:
    a, b = parse_value(normalise(gold)), parse_value(normalise(pred))
    assert a is not None and b is not None
    assert equal(a, b, TOL) is expected


@pytest.mark.parametrize(
    ("gold", "pred"),
    [("2", "\\{2\\}"), ("x=5", "y=5"), ("(2,1)", "(2,1)"), ("\\{1,2\\}", "(1,2)")],
)
def test_fast_path_leaves_ambiguous_kinds_undecided(gold: str, pred: str) -> None:
    a, b = parse_value(normalise(gold)), parse_value(normalise(pred))
    assert a is not None and b is not None
    assert equal(a, b, TOL) is None


@pytest.mark.parametrize(
    "text", ["x^2-1", "\\sqrt{8}", "2^{2^{2^{30}}}", "1e999999", "9" * 500, "10^{100000}", "[1,2,3]", "((1,2),3)"]
)
def test_fast_path_does_not_parse_what_it_cannot_bound(text: str) -> None:
    assert parse_value(text) is None


def test_strict_percent_and_relative_tolerance() -> None:
    fifty, half, pct = Num(Fraction(50)), Num(Fraction(1, 2), decimal=True), Num(Fraction(50), percent=True)
    assert equal(pct, fifty, Tolerance(percent="strict")) is False
    assert equal(pct, half, Tolerance(percent="strict")) is True
    near = Num(Fraction(1001, 1000), decimal=True)
    assert equal(Num(Fraction(1)), near, TOL) is False
    assert equal(Num(Fraction(1)), near, Tolerance(rel_tol=0.01)) is True


def test_groups_have_kinds() -> None:
    assert isinstance(parse_value("\\{1,2\\}"), Group)
    pair = parse_value("(1,2]")
    assert isinstance(pair, Group) and (pair.kind, pair.left_closed, pair.right_closed) == ("interval", False, True)


@given(st.fractions(min_value=-(10**6), max_value=10**6, max_denominator=50))
@example(Fraction(35812517, 43))  # float formatting writes ...139 here; the correctly rounded spelling is ...140
def test_a_fraction_equals_itself_in_every_spelling(value: Fraction) -> None:
    sign = "-" if value < 0 else ""
    spellings = [
        f"{value.numerator}/{value.denominator}",
        f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}",
        f"{sign}\\dfrac{{{abs(value.numerator)}}}{{{value.denominator}}}",
        _rounded(value, 9),
    ]
    values = [parse_value(normalise(s)) for s in spellings]
    assert all(v is not None for v in values)
    for v in values[1:]:
        assert equal(values[0], v, TOL) is True  # type: ignore[arg-type]


def _rounded(value: Fraction, places: int) -> str:
    """``value`` written with ``places`` decimals, correctly rounded (a float's digits can be off by one there)."""
    with localcontext() as context:
        context.prec = 60
        exact = Decimal(value.numerator) / Decimal(value.denominator)
        return str(exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN))


@given(st.integers(min_value=0, max_value=10**12))
def test_thousands_separators(value: int) -> None:
    assert equal(parse_value(f"{value:,}"), parse_value(str(value)), TOL) is True  # type: ignore[arg-type]
    assert equal(parse_value(f"{value:,}"), parse_value(str(value + 1)), TOL) is False  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("2^{2^{2^{30}}}", True),
        ("10^(10^10)", True),
        ("9**9**9", True),
        ("7^{7^{7^{7}}}", True),
        ("5^{5^{5^{5^{5}}}}", True),
        ("2^{1000000}", True),
        ("2^{10}", False),
        ("10^{100}", False),
        ("2^{40000}", False),
        ("2^{2^{2^{2}}}", False),
        ("x^{2^{100}}", False),
        ("1^{10^{100}}", False),
        ("1.5^{2}", False),
    ],
)
def test_power_towers_are_sized_without_evaluating_them(text: str, refused: bool) -> None:
    assert (huge_power(text) is not None) is refused


def test_nesting_depth() -> None:
    assert nesting_depth("\\frac{1}{(2+[3])}") == 3
    assert nesting_depth("(" * 5000 + ")" * 5000) == 5000
