"""Build the LaTeX parser's prediction cache (ANTLR's DFA) that ships with math-equiv, from generated answers.

    .venv/bin/python scripts/build_math_dfa.py        # writes src/evalsi/evaluators/rl/math_equiv/data/
    .venv/bin/python scripts/build_math_dfa.py --pairs 400 --output /tmp/dfa.json.gz

A fresh math-equiv worker learns the parser's predictions on its first parses of each shape of answer; the
template loads the shipped DFA when the user's cache holds none, so a machine's first run starts with them. The
file is keyed on the installed ANTLR and latex2sympy versions and the grammar: rebuild it after upgrading either
(``tests/evaluators/rl/test_math_equiv_bundled_dfa.py`` fails until then).

The training answers are generated here, by a fixed pseudo-random generator: numbers, fractions, roots,
polynomials, functions, equations, inequalities, sets, intervals, tuples, matrices, sums, units and the like,
nested at random, and the longer forms solutions write (lists separated by semicolons, memberships, chains of
inequalities, recurrences, equations of lines, bracketed arrays, sums and products of matrices, numbers in a base,
words, approximations), each compared with a rewriting of itself or with another answer of the same shape, the
way the workers compare them (normalised as the scoring process does, then :func:`compare` in two-stage parsing).
No benchmark or test corpus is read, so the DFA does not favour the answers any measurement scores.

The template's own warm-up comparisons are parsed first and every state they reach is kept, so a template
learns nothing while it warms up. With the defaults (6,000 pairs, states reached by at least 3 answers, and the
warm-up's) the file holds 2,497 DFA states in 566 KB; loading it costs a worker template about 0.3 s of CPU, and
each state it holds saves every worker that needs it about 2 ms of learning. More pairs keep more, rarer states
(10,000: 3,292 states, 785 KB) that cost more to load than they save.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = 20261205
"""The generator's fixed starting state: the same answers on every build."""

SHORT = 0.55
"""The share of answers of a short, common shape (the rest nest expressions at random)."""
WRITTEN = 0.3
"""The share of answers in one of the longer written forms (:meth:`Answers.written`)."""
LEAST = 3
"""States reached by fewer generated answers are left out: they belong to one rare shape, cost loading time in
every template and are unlikely to be met again; a prediction that needs one learns it as before."""

VARIABLES = ["x", "y", "t", "n", "a", "b", "k", "m", "r", "z"]
GREEK = ["\\pi", "\\theta", "\\alpha", "\\beta"]
FUNCTIONS = ["\\sin", "\\cos", "\\tan", "\\ln", "\\log", "\\sec", "\\cot", "\\arctan", "\\arcsin", "\\exp"]
UNITS = ["\\text{ cm}", "\\text{ m}", "\\text{ cm}^2", " \\mbox{ inches}", "\\text{ degrees}", "^\\circ", "\\%"]
TRIG = ["\\sin", "\\cos", "\\tan"]
RELATIONS = ["<", ">", "\\le", "\\ge", "\\leq", "\\geq", "\\neq"]
CHAIN = ["<", "\\le ", "\\leq ", "<", "\\leq "]


class Answers:
    """Random LaTeX answers, from a generator of its own."""

    def __init__(self, state: int) -> None:
        self.rng = random.Random(state)

    def pick(self, options: list[str]) -> str:
        """One of ``options``."""
        return options[self.rng.randrange(len(options))]

    def integer(self, low: int = -20, high: int = 60) -> str:
        """An integer in ``[low, high]``."""
        return str(self.rng.randint(low, high))

    def positive(self) -> str:
        """A small positive integer."""
        return str(self.rng.randint(1, 12))

    def number(self) -> str:
        """A number as answers write them: mostly integers, some decimals, thousands and powers of ten."""
        kind = self.rng.randrange(9)
        if kind == 0:
            return f"{self.rng.randint(0, 99)}.{self.rng.randint(0, 999)}"
        if kind == 1:
            return f"{self.rng.randint(1, 9)},{self.rng.randint(100, 999)}"
        if kind == 2:
            return f"{self.positive()}\\times 10^{{{self.integer(-9, 12)}}}"
        return self.integer(0, 99)

    def atom(self) -> str:
        """A number, a letter or a constant, the leaves most answers are made of."""
        kind = self.rng.randrange(12)
        if kind < 5:
            return self.number()
        if kind < 9:
            return self.pick(VARIABLES)
        if kind == 9:
            return self.pick(GREEK)
        if kind == 10:
            return f"{self.pick(VARIABLES)}_{{{self.pick([self.positive(), 'n', 'n-1', 'k'])}}}"
        return self.pick(["e", "\\infty", "i"])

    def factor(self, depth: int) -> str:
        """One factor of a term: a leaf, a power, a root, a fraction, a function or a bracketed expression."""
        if depth >= 2:
            return self.atom()
        inner: Callable[[], str] = lambda: self.expression(depth + 1)  # noqa: E731
        builders: list[tuple[int, Callable[[], str]]] = [
            (8 + 24 * depth, self.atom),
            (4, lambda: f"{self.pick(VARIABLES)}^{self.rng.randint(2, 4)}"),
            (2, lambda: f"{self.pick(VARIABLES)}^{{{self.rng.randint(2, 12)}}}"),
            (1, lambda: f"{self.atom()}^{{{inner()}}}"),
            (5, lambda: f"\\frac{{{inner()}}}{{{inner()}}}"),
            (1, lambda: f"\\dfrac{{{inner()}}}{{{inner()}}}"),
            (1, lambda: f"{self.atom()}/{self.atom()}"),
            (4, lambda: f"\\sqrt{{{inner()}}}"),
            (1, lambda: f"\\sqrt[{self.rng.randint(3, 4)}]{{{inner()}}}"),
            (2, lambda: f"{self.pick(FUNCTIONS)}({inner()})"),
            (1, lambda: f"{self.pick(FUNCTIONS)} {self.pick(VARIABLES)}"),
            (1, lambda: f"{self.pick(TRIG)}^2({self.pick(VARIABLES)})"),
            (1, lambda: f"\\log_{{{self.positive()}}}{{{self.atom()}}}"),
            (3, lambda: f"({inner()})"),
            (1, lambda: f"({inner()})^{self.rng.randint(2, 3)}"),
            (1, lambda: f"\\left({inner()}\\right)"),
            (1, lambda: f"|{inner()}|"),
            (1, lambda: f"{self.positive()}!"),
            (1, lambda: f"\\binom{{{self.positive()}}}{{{self.positive()}}}"),
        ]
        weights = [weight for weight, _ in builders]
        return self.rng.choices([build for _, build in builders], weights)[0]()

    def term(self, depth: int) -> str:
        """A product: an optional coefficient, then one or two factors."""
        coefficient = self.pick(["", "", "", self.positive(), self.positive()])
        factors = [self.factor(depth) for _ in range(self.rng.choice([1, 1, 1, 1, 2]))]
        joiner = self.pick(["", "", " \\cdot ", "\\times "])
        return coefficient + joiner.join(factors)

    def expression(self, depth: int = 0) -> str:
        """One to three terms added or subtracted."""
        text = self.pick(["", "", "", "-"]) + self.term(depth)
        for _ in range(self.rng.choice([0, 0, 0, 1, 1, 2] if depth == 0 else [0, 0, 0, 1])):
            text += self.pick(["+", "-", " + ", " - "]) + self.term(depth)
        return text

    def short(self) -> str:
        """One of the short shapes most competition answers take, with random numbers and letters."""
        n, v = self.positive, lambda: self.pick(VARIABLES)
        shapes: list[Callable[[], str]] = [
            lambda: self.integer(-99, 999),
            lambda: self.number(),
            lambda: f"\\frac{{{n()}}}{{{n()}}}",
            lambda: f"-\\frac{{{n()}}}{{{n()}}}",
            lambda: f"{n()}/{n()}",
            lambda: f"{n()}\\sqrt{{{n()}}}",
            lambda: f"\\sqrt{{{n()}}}",
            lambda: f"\\frac{{\\sqrt{{{n()}}}}}{{{n()}}}",
            lambda: f"\\frac{{{n()}\\sqrt{{{n()}}}}}{{{n()}}}",
            lambda: f"{n()}\\pi",
            lambda: f"\\frac{{{n()}\\pi}}{{{n()}}}",
            lambda: f"\\frac{{\\pi}}{{{n()}}}",
            lambda: f"{n()}+{n()}\\sqrt{{{n()}}}",
            lambda: f"{n()}-{n()}\\sqrt{{{n()}}}",
            lambda: f"\\frac{{{n()}+\\sqrt{{{n()}}}}}{{{n()}}}",
            lambda: f"\\frac{{{n()}\\pm\\sqrt{{{n()}}}}}{{{n()}}}",
            lambda: f"{v()}^2+{n()}{v()}+{n()}",
            lambda: f"{n()}{v()}^2-{n()}{v()}+{n()}",
            lambda: f"{n()}{v()}+{n()}",
            lambda: f"{n()}{v()}-{n()}",
            lambda: f"({v()}-{n()})({v()}+{n()})",
            lambda: f"{v()}^{{{n()}}}",
            lambda: f"{n()}^{{{n()}}}",
            lambda: f"({n()},{n()})",
            lambda: f"({n()},{n()},{n()})",
            lambda: f"(-{n()},{n()})",
            lambda: f"\\left({n()},{n()}\\right)",
            lambda: f"[{n()},{n()}]",
            lambda: f"({n()},\\infty)",
            lambda: f"(-\\infty,{n()}]",
            lambda: f"\\{{{n()},{n()}\\}}",
            lambda: f"{n()},{n()}",
            lambda: f"{v()}={n()}",
            lambda: f"{v()}=-{n()}",
            lambda: f"{v()}=\\frac{{{n()}}}{{{n()}}}",
            lambda: f"y={n()}{v()}+{n()}",
            lambda: f"{v()}^2+y^2={n()}",
            lambda: f"{v()}>{n()}",
            lambda: f"{v()}\\le{n()}",
            lambda: f"{n()}\\times 10^{{{n()}}}",
            lambda: f"{n()}^\\circ",
            lambda: f"{n()}\\%",
            lambda: f"{n()}\\text{{ cm}}",
            lambda: f"\\dfrac{{{n()}}}{{{n()}}}",
            lambda: f"{n()}\\frac{{{n()}}}{{{n()}}}",
            lambda: f"\\frac{{{v()}}}{{{n()}}}",
            lambda: f"\\frac{{{n()}}}{{{v()}}}",
            lambda: f"{v()}^{n()}",
            lambda: f"\\sin {v()}",
            lambda: f"\\log_{{{n()}}}{n()}",
            lambda: f"e^{{{n()}{v()}}}",
            lambda: f"{n()}!",
            lambda: f"\\binom{{{n()}}}{{{n()}}}",
            lambda: f"{n()}i",
            lambda: f"{n()}+{n()}i",
            lambda: f"\\begin{{pmatrix}} {n()} \\\\ {n()} \\end{{pmatrix}}",
        ]
        return shapes[self.rng.randrange(len(shapes))]()

    def answer(self) -> str:
        """An answer: a short common shape, or an expression, relation, set, interval, tuple, matrix, sum..."""
        kind = self.rng.randrange(20)
        e = self.expression
        draw = self.rng.random()
        if draw < SHORT:
            return self.short()
        if draw < SHORT + WRITTEN:
            return self.written()
        if kind < 5:
            return e()
        shapes: list[Callable[[], str]] = [
            lambda: f"{self.pick(VARIABLES)}={e()}",
            lambda: f"{e()}={e()}",
            lambda: f"{self.pick(VARIABLES)} {self.pick(RELATIONS)} {e()}",
            lambda: f"{e()} {self.pick(RELATIONS)} {self.pick(VARIABLES)} {self.pick(RELATIONS)} {e()}",
            lambda: "\\{" + ", ".join(e() for _ in range(self.rng.randint(1, 4))) + "\\}",
            lambda: self.interval(),
            lambda: f"{self.interval()} \\cup {self.interval()}",
            lambda: "(" + ", ".join(e() for _ in range(self.rng.randint(2, 3))) + ")",
            lambda: self.matrix(),
            lambda: f"\\sum_{{k={self.rng.randint(0, 1)}}}^{{{self.pick(['n', 'n-1', self.positive()])}}} {e(2)}",
            lambda: f"\\prod_{{i=1}}^{{n}} {e(2)}",
            lambda: f"{self.number()}{self.pick(UNITS)}",
            lambda: f"{self.pick(VARIABLES)} = {e()} \\text{{ or }} {self.pick(VARIABLES)} = {e()}",
            lambda: f"{self.pick(['f', 'g', 'h'])}({self.pick(VARIABLES)})={e()}",
            lambda: f"\\pm {e()}",
        ]
        return shapes[kind - 5]()

    def written(self) -> str:
        """An answer in one of the longer forms solutions write.

        Lists separated by semicolons, memberships, chains of inequalities, recurrences, lines, bracketed arrays,
        numbers in a base, words, approximations, fractions of expressions.
        """
        n, v, e = self.positive, lambda: self.pick(VARIABLES), self.expression
        frac = lambda: self.pick([f"\\frac{{{n()}}}{{{n()}}}", f"-\\frac{{{n()}}}{{{n()}}}", n(), f"-{n()}"])  # noqa: E731
        sub = lambda: f"{v()}_{{{self.pick([n(), 'n', 'n-1', 'n-2', 'n+1', 'k'])}}}"  # noqa: E731
        shapes: list[Callable[[], str]] = [
            lambda: f"({e(1)})",
            lambda: f"\\left({frac()}\\right)",
            lambda: f"({frac()},{frac()})",
            lambda: f"\\left({frac()}, {frac()}, {frac()}\\right)",
            lambda: f"{n()}{v()}{self.pick(['+', '-'])}{n()}{v()}{self.pick(['+', '-'])}{n()}=0",
            lambda: f"{n()}{v()}{self.pick(['+', '-'])}{n()}{v()}={self.integer()}",
            lambda: f"{v()}={frac()}{v()}{self.pick(['+', '-'])}\\frac{{{n()}}}{{{n()}}}",
            lambda: f"{v()}={self.integer()}-{frac()}{v()}",
            lambda: ";".join(f"{v()}_{{{i + 1}}}={e(1)}" for i in range(self.rng.randint(2, 3))),
            lambda: ";".join(e(1) for _ in range(self.rng.randint(2, 3))),
            lambda: ", ".join(f"{v()}_{i + 1}={frac()}" for i in range(self.rng.randint(2, 3))),
            lambda: f"{sub()}={sub()}{self.pick(['+', '-'])}{sub()}",
            lambda: f"{sub()}={n()}{sub()}{self.pick(['+', '-'])}{n()}",
            lambda: f"{frac()}{self.pick(CHAIN)}|{v()}|{self.pick(CHAIN)}{frac()}",
            lambda: f"{frac()}{self.pick(CHAIN)}{v()}{self.pick(CHAIN)}{frac()}",
            lambda: f"{v()}\\in{self.interval()}",
            lambda: f"{v()}\\in[{frac()},{frac()}]\\cup[{frac()},{frac()}]",
            lambda: f"{v()} \\in \\{{{n()},{n()}\\}}",
            lambda: f"{v()}={e(1)}\\approx{self.number()}",
            lambda: self.array(),
            lambda: f"{self.rng.randint(1, 1 << 12):b}_2",
            lambda: f"{self.rng.randint(10, 999)}_{{{self.rng.randint(3, 9)}}}",
            lambda: self.pick(["yes", "no", "\\text{yes}", "\\text{No}", "\\text{(B)}", "C", "\\textbf{(D)}"]),
            lambda: "".join(f"({v()}{self.pick(['+', '-'])}{n()})" for _ in range(self.rng.randint(2, 3))),
            lambda: f"{n()}{v()}({v()}{self.pick(['+', '-'])}{n()})",
            lambda: f"{n()}{self.pick(TRIG)} {v()}{self.pick(TRIG)} {v()}",
            lambda: f"{self.pick(TRIG)}{n()}{v()}",
            lambda: f"{self.pick(TRIG)}\\frac{{\\pi}}{{{n()}}}",
            lambda: f"\\sqrt[{self.rng.randint(3, 5)}]{{{v()}}}^{self.rng.randint(2, 3)}",
            lambda: f"{v()}^{{{n()}/{n()}}}",
            lambda: f"\\tfrac{{{n()}}}{{{n()}}}",
            lambda: f"{self.number()}\\times10^{{-{n()}}}",
            lambda: f"{n()},{self.rng.randint(100, 999)},{self.rng.randint(100, 999)}",
            lambda: f"{n()}^{{\\circ}}",
            lambda: f"{n()}\\,\\text{{{self.pick(['m', 'km/h', 'cm^2', 'dollars', 'hours'])}}}",
            lambda: f"\\frac{{{e(1)}}}{{{e(1)}}}",
            lambda: f"\\frac{{\\sqrt{{{n()}}}{self.pick(['+', '-'])}\\sqrt{{{n()}}}}}{{{n()}}}",
            lambda: f"{self.pick(['f', 'g'])}({v()})",
            lambda: f"\\sum_{{{v()}=1}}^{{n}}\\frac{{1}}{{{v()}({v()}+1)}}",
            lambda: f"\\sum_{{i=1}}^{{n}}\\sum_{{j=1}}^{{i}}{e(2)}",
            lambda: f"\\sum_{{k=0}}^{{n}}\\binom{{n}}{{k}}{e(2)}",
            lambda: f"\\prod_{{k=1}}^{{n}}\\frac{{{e(2)}}}{{{e(2)}}}",
            lambda: f"{n()}^{{{self.rng.randint(10, 999)}}}{self.pick(['+', '-'])}{n()}",
            lambda: f"\\frac{{{n()}^{{{n()}}}-1}}{{{n()}^{{{n()}}}}}",
            lambda: f"{n()}^{{{v()}+1}}",
            lambda: f"{n()}\\cdot{n()}^{v()}",
            lambda: ";".join(f"{n()}^{{{self.pick(['-', ''])}\\frac{{{e(2)}}}{{{n()}}}}}" for _ in range(2)),
            lambda: f"({self.matrix(fractions=True)})",
            lambda: self.pick(["+", "-", "", " \\cdot "]).join([self.matrix(), self.matrix()]),
            lambda: f"{n()}{self.matrix()}",
            lambda: f"{{{n()},{n()}}}",
            lambda: self.pick(["\\emptyset", "\\varnothing", "\\{\\}", "\\mathbb{R}"]),
            lambda: f"{self.pick(['', '-'])}{n()}{self.pick(['+', '-'])}{n()}i",
            lambda: f"i({n()}{self.pick(['+', '-'])}i)",
        ]
        return shapes[self.rng.randrange(len(shapes))]()

    def array(self) -> str:
        """A matrix written as a bracketed ``array`` environment."""
        size = self.rng.randint(2, 3)
        rows = "\\\\".join("&".join(self.integer(-9, 9) for _ in range(size)) for _ in range(size))
        left, right = self.pick([("[", "]"), ("\\left[", "\\right]"), ("\\left(", "\\right)")])
        return f"{left}\\begin{{array}}{{{'c' * size}}}{rows}\\end{{array}}{right}"

    def interval(self) -> str:
        """An interval, open or closed at either end, possibly unbounded."""
        left = self.pick(["(", "["])
        right = self.pick([")", "]"])
        low = self.pick(["-\\infty", self.expression(2)])
        high = self.pick(["\\infty", self.expression(2)])
        if low == "-\\infty":
            left = "("
        if high == "\\infty":
            right = ")"
        return f"{left}{low},{high}{right}"

    def matrix(self, fractions: bool = False) -> str:
        """A small matrix or vector, its entries numbers and letters (and fractions, with ``fractions``)."""
        size = self.rng.randint(1, 3)
        entry: Callable[[], str] = lambda: self.expression(2)  # noqa: E731
        if fractions:
            entry = lambda: self.pick([self.expression(2), f"\\frac{{{self.positive()}}}{{{self.expression(2)}}}"])  # noqa: E731
        rows = " \\\\ ".join(" & ".join(entry() for _ in range(size)) for _ in range(self.rng.randint(1, 3)))
        env = self.pick(["pmatrix", "bmatrix"])
        return f"\\begin{{{env}}} {rows} \\end{{{env}}}"

    def rewrite(self, answer: str) -> str:
        """The same answer written another way, or another generated answer (most often a different value)."""
        kind = self.rng.randrange(5)
        if kind == 0:
            return answer.replace(", ", ",").replace(" = ", "=").replace(" + ", "+")
        if kind == 1:
            return answer.replace("\\frac", "\\dfrac").replace("\\cdot", "\\times")
        if kind == 2:
            return answer.replace("(", "\\left(").replace(")", "\\right)") if "(" in answer else answer
        return self.answer()

    def completion(self, answer: str) -> str:
        """A model's last sentence giving ``answer``, in one of the usual styles."""
        styles = [
            f"So the answer is $\\boxed{{{answer}}}$.",
            f"Final Answer: The final answer is ${answer}$. I hope it is correct.",
            f"Therefore the result is \\[\\boxed{{{answer}}}\\]",
        ]
        return self.pick(styles)


class Visits:
    """How many distinct training answers reached each DFA state (by ``id``), counted as the parser predicts."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.seen: dict[int, int] = {}
        self.answer = 0
        self.warm: set[int] = set()
        """The states the template's warm-up reached (answer -1): kept whatever their count, every template
        parses them."""

    def install(self) -> None:
        """Count every state ANTLR's prediction moves to, whether it was cached or computed."""
        from antlr4.atn.ParserATNSimulator import ParserATNSimulator

        def counting(method: Callable[..., object]) -> Callable[..., object]:
            def moved(*args: object) -> object:
                state = method(*args)
                if state is not None and self.answer == -1:
                    self.warm.add(id(state))
                if state is not None and self.seen.get(id(state)) != self.answer:
                    self.seen[id(state)] = self.answer
                    self.counts[id(state)] = self.counts.get(id(state), 0) + 1
                return state

            return moved

        ParserATNSimulator.getExistingTargetState = counting(ParserATNSimulator.getExistingTargetState)
        ParserATNSimulator.computeTargetState = counting(ParserATNSimulator.computeTargetState)

    def common(self, least: int) -> Callable[[object], bool]:
        """Whether a state was reached by ``least`` answers or more, or by the template's warm-up (answer -1)."""
        return lambda state: self.counts.get(id(state), 0) >= least or id(state) in self.warm


def train(pairs: int, budget: float, visits: Visits) -> None:
    """Parse ``pairs`` generated (reference, answer) pairs the way the symbolic workers do."""
    import math_verify.grader
    import math_verify.parser

    from evalsi.evaluators.rl.math_equiv import _symbolic
    from evalsi.evaluators.rl.math_equiv._extract import extract_answer, extract_reference
    from evalsi.evaluators.rl.math_equiv._normalise import normalise_with_unit
    from evalsi.evaluators.rl.math_equiv._parsing import install
    from evalsi.evaluators.rl.math_equiv._pool import run_with_cpu_budget
    from evalsi.evaluators.rl.math_equiv._symbolic import compare

    math_verify.grader.TIMEOUT_WARNING_SHOWN = True  # each comparison is bounded here, as in the workers
    math_verify.parser.TIMEOUT_WARNING_SHOWN = True
    install()
    visits.install()
    visits.answer = -1
    _symbolic.warm_math_verify()
    _symbolic._parsed_gold.cache_clear()
    _symbolic._latex.cache_clear()
    answers = Answers(GENERATOR)
    done = failed = 0
    for number in range(pairs):
        visits.answer = number
        gold = answers.answer()
        completion = answers.completion(answers.rewrite(gold))
        extracted = extract_answer(completion)
        if extracted is None:
            continue
        reference, _ = normalise_with_unit(extract_reference(gold).text)
        answer, _ = normalise_with_unit(extracted.text)
        if not reference or not answer:
            continue
        try:
            run_with_cpu_budget(compare, ("math-verify", reference, answer, 6, 6), budget)
            done += 1
        except Exception:  # a timeout or a backend error: the parses it made are learnt all the same
            failed += 1
    print(f"compared {done} generated pairs ({failed} timed out or failed)", file=sys.stderr)


def main() -> int:
    """Learn the DFA from generated answers and write the common part of it."""
    from evalsi.evaluators.rl.math_equiv import _prediction_cache

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=6000, help="generated pairs to compare")
    parser.add_argument("--budget", type=float, default=2.0, help="CPU seconds per comparison")
    parser.add_argument("--least", type=int, default=LEAST, help="answers that must reach a state to keep it")
    parser.add_argument("--output", type=Path, default=_prediction_cache.BUNDLED)
    args = parser.parse_args()
    cache = _prediction_cache.installed_cache(ROOT)  # nothing is loaded: the DFA is learnt from empty
    if cache.states():
        raise SystemExit("the parser already holds DFA states; run this script in a fresh process")
    visits = Visits()
    train(args.pairs, args.budget, visits)
    states = cache.export(args.output, visits.common(args.least))
    size = args.output.stat().st_size
    print(f"wrote {args.output} ({states} of {cache.states()} DFA states, {size:,} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
