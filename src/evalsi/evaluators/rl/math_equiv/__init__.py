r"""``math-equiv``: the completion's final answer equals the reference, numerically or symbolically.

The final answer is extracted in this order (``\boxed{}``, ``<answer>``, ``#### x``, "the answer is x",
else the last number), normalised (delimiters, units, ``\text{}``, degrees, ``\dfrac``…), and compared:

1. as text, then from the memo of earlier verdicts on the same (reference, answer);
2. by the pure-Python fast path (numbers, fractions, percentages, tuples, intervals, sets), which decides the
   easy cases in microseconds without importing sympy in the scoring process;
3. otherwise by math-verify or sympy in a pool of warm worker processes, every comparison bounded by ``timeout``
   (an overrunning worker is killed and replaced; the answer scores 0 with the reason).

A batch sends all of its undecided comparisons to the pool at once, so they run in parallel over the cores.
The value is pass/fail; the reason and details say what was extracted, from where, and how it was compared.

Example:
    >>> from evalsi.evaluators import ScoreContext, get_evaluator
    >>> from evalsi.records import Record
    >>> math_equiv = get_evaluator("math-equiv")
    >>> record = Record(completion="So the total is \\boxed{1,234}.", reference="1234")
    >>> math_equiv.score(record, math_equiv.parse_params({}), ScoreContext()).reason
    "'1,234' (from \\boxed{}) equals the reference '1234' (numeric)"

"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from evalsi._util.public import publish
from evalsi.evaluators._base import Evaluator, ScoreContext
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import Score
from evalsi.evaluators.rl.math_equiv._decide import Judge
from evalsi.evaluators.rl.math_equiv._params import MathEquivParams
from evalsi.evaluators.rl.math_equiv._pool import close_all as _close_pools
from evalsi.records import Record

__all__ = ["MathEquiv", "MathEquivParams"]


@register
class MathEquiv(Evaluator[MathEquivParams]):
    r"""Pass when the extracted final answer is equivalent to the reference (any item of a list reference).

    Finding the answer. The last group of adjacent \boxed{} (boxes separated only by punctuation, and/or, a
    short \text{} phrase or "x ="), else <answer>, ####, "the answer is"/"Final Answer:", else the last math
    span or number. A "Final Answer:" line after the last box wins. In an answer sentence the math span, else
    the sentence's last number, is the answer; markdown (**41**, `6`) is stripped. A completion cut off inside
    its final box or right after "the final answer is" scores 0 (an earlier box does not count), and so does
    one ending in a repetition loop.

    Several answers. Conjunctions (and, or, \quad) and adjacent boxes always separate answers (100 or 200 is two
    answers); the reference's shape decides whether a comma does (12,350 is one number against 12350; 3,-4 is
    two). A list answers a list reference when the items pair off one to one (any order; by name for a=3, b=7).
    Several different boxed answers against a single reference score 0: hedging never pays. The same answer
    boxed twice counts once.

    Comparing. Exact values compare exactly, never in floating point (3^{-120} vs 3^{-121}, 1/1999! vs
    1/1998!); a decimal matches when it is the value rounded at its last written digit with at least
    significant_digits digits (6.12e-8 is not 6.17e-8). Free symbols must match (9/2 is not 9t/2). Units or
    suffix words on both sides must agree (7 a.m. vs 7 p.m., 3 hours vs 3 minutes; a.m./p.m. make 24-hour
    times, million scales); a unit on one side only is ignored (36 m^2 vs 36). One-variable inequalities are
    intervals (x > -1 is (-1, oo)). Plain-text and Unicode spellings (pi/3, sqrt(5), exp(2), π, √2, \varnothing,
    i), mixed numbers (1 1/2, 2\frac{3}{4}), logarithm bases (\log_2 8) and juxtaposed products (2^4 7^2) are
    read as LaTeX. Symbolic items are decided exactly or at random points in milliseconds before the backend's
    simplification, which runs in killable workers bounded by timeout; a backend's "equal" on values with
    symbols, sums or products is overruled when they differ at random points (a sum's indexed terms F_{n-k-1}
    are functions of the index there).

    Equations. A bare value answers a named one (3 and x = 3; k = 2+2 = 4 is 4), and the same name compares by
    value. Different variables are different answers (x = 3 is not y = 3); y, or the function's name, stands
    for a function's value (g(t) = 4t-1, y = 4t-1); other left sides are compared as whole equations, equal when
    one is a constant multiple of the other (x = 3 and 2x = 6; \cos(x) = a is not \sin(x) = a).

    How it was decided. details["method"] names the stage that decided: same text, numeric (or as sets, as
    intervals...), exact, equal at random points, different variables, math-verify, sympy; for several answers
    the shape and each way its items were decided (list of answers (numeric, exact)).
    """

    name = "math-equiv"
    summary = "The final answer (\\boxed{}, <answer>, ####, 'the answer is', last number) equals the reference."
    params_model = MathEquivParams
    reads = ("completion", "reference")
    pack = "rl"

    def __init__(self) -> None:
        self._judges: dict[MathEquivParams, Judge] = {}
        self._lock = threading.Lock()

    def judge(self, params: MathEquivParams) -> Judge:
        """The judge (memo, parsed references) for these params, made on first use.

        Args:
            params: The component's validated params.

        """
        judge = self._judges.get(params)
        if judge is None:
            with self._lock:
                judge = self._judges.setdefault(params, Judge(params))
        return judge

    def score(self, record: Record, params: MathEquivParams, ctx: ScoreContext) -> Score:
        """Pass/fail for one record; skipped without a reference.

        Args:
            record: The record to score.
            params: The component's validated params.
            ctx: Per-call context (cancellation, deadlines, the pools to use).

        """
        return self.score_batch([record], params, ctx)[0]

    def score_batch(self, records: Sequence[Record], params: MathEquivParams, ctx: ScoreContext) -> list[Score]:
        """Scores in order; the batch's undecided comparisons run together on the worker pool.

        Args:
            records: The records to score.
            params: The component's validated params.
            ctx: Per-call context (cancellation, deadlines, the pools to use).

        """
        try:
            return self.judge(params).decide(records)
        except Exception as exc:  # a bug must not fail the batch: every record errors, with the cause
            return [Score.error(f"math-equiv failed: {type(exc).__name__}: {exc}")] * len(records)

    def close(self) -> None:
        """Stop the symbolic worker processes and forget memoised verdicts."""
        with self._lock:
            self._judges.clear()
        _close_pools()


publish(__name__)
