"""Deciding one batch: extract, normalise, answer from the memo or the fast path, and hand the rest to workers.

A :class:`Judge` holds what outlives a batch for one set of params: the parsed references and the memo of
verdicts keyed on (reference, normalised answer).
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from evalsi.evaluators._score import Score
from evalsi.evaluators.rl.math_equiv._compare import decide
from evalsi.evaluators.rl.math_equiv._extract import Extracted, extract_answer, extract_reference
from evalsi.evaluators.rl.math_equiv._guard import huge_power, nesting_depth
from evalsi.evaluators.rl.math_equiv._memo import Memo
from evalsi.evaluators.rl.math_equiv._normalise import normalise_with_unit
from evalsi.evaluators.rl.math_equiv._numeric import Tolerance, Value, item_verdict, parse_value
from evalsi.evaluators.rl.math_equiv._params import MathEquivParams
from evalsi.evaluators.rl.math_equiv._pool import SymbolicPool, shared_pool
from evalsi.evaluators.rl.math_equiv._symbolic import compare
from evalsi.records import Record, reference_options

Outcome = tuple[bool | None, str]
"""(equal, how it was decided); ``None`` when it could not be decided (an error, never memoised)."""

_SOURCES = {
    "boxed": "\\boxed{}",
    "answer-tag": "<answer>",
    "####": "####",
    "answer-is": "'the answer is'",
    "last-number": "the last number",
    "reference": "the reference",
    "cut-off": "a cut-off answer",
    "loop": "a repetition loop",
}
_REFUSALS = {
    "cut-off": "the completion stops inside its final answer (cut off); an earlier answer does not count",
    "loop": "the completion ends in a repetition loop; its last number is not an answer",
}


@dataclass(frozen=True, slots=True)
class Parsed:
    """An answer or a reference, normalised and parsed once (GRPO repeats both)."""

    canonical: str
    value: Value | None
    unit: str = ""


RETRIES_AFTER_DEATH = 2
"""Times a comparison whose worker died is sent again before it counts as an error."""


def _parse(text: str) -> Parsed:
    canonical, unit = normalise_with_unit(text)
    return Parsed(canonical, parse_value(canonical) if canonical else None, unit)


@dataclass(slots=True)
class Pending:
    """One record's answer and, per reference, its outcome (None until decided)."""

    answer: Extracted
    canonical: str
    golds: list[Parsed]
    outcomes: list[Outcome | None] = field(default_factory=list)
    truncated: bool = False


class Judge:
    """Decides batches for one set of params."""

    def __init__(self, params: MathEquivParams) -> None:
        self.params = params
        self.tolerance = Tolerance(
            params.float_rounding, params.rel_tol, params.percent, significant_digits=params.significant_digits
        )
        self.backend = resolve_backend(params.backend)
        self.memo: Memo[tuple[str, str], Outcome] = Memo(1 << 18)
        self.golds: Memo[str, Parsed] = Memo(1 << 16)
        self.answers: Memo[str, Parsed] = Memo(1 << 16)

    def decide(self, records: Sequence[Record]) -> list[Score]:
        """Scores in order; undecided comparisons of the whole batch run in parallel on the worker pool."""
        prepared: list[Score | Pending] = []
        launched = False
        for record in records:
            item = self._prepare(record)
            prepared.append(item)
            if not launched and isinstance(item, Pending) and self._needs_workers(item):
                self._pool().prestart()  # the workers' start-up overlaps the rest of the batch
                launched = True
        jobs: dict[tuple[str, str], list[tuple[Pending, int]]] = {}
        for item in prepared:
            if isinstance(item, Pending):
                for position, outcome in enumerate(item.outcomes):
                    if outcome is None:
                        jobs.setdefault((item.golds[position].canonical, item.canonical), []).append((item, position))
        if jobs:
            for key, outcome in zip(jobs, self._symbolic(list(jobs)), strict=True):
                for pending, position in jobs[key]:
                    pending.outcomes[position] = outcome
        return [item if isinstance(item, Score) else self._score(item) for item in prepared]

    def _needs_workers(self, pending: Pending) -> bool:
        """Whether a comparison of this record is left for the symbolic workers (not decided, not refused)."""
        if self.backend not in ("math-verify", "sympy"):
            return False
        return any(
            outcome is None and self._refuse(gold.canonical, pending.canonical) is None
            for gold, outcome in zip(pending.golds, pending.outcomes, strict=False)
        )

    def _pool(self) -> SymbolicPool:
        return shared_pool(self.params.workers, self.params.worker_memory_mb)

    def _prepare(self, record: Record) -> Score | Pending:
        references = _references(record.reference)
        if not references:
            return Score.skipped("no reference")
        text = record.completion_text
        truncated = len(text) > self.params.max_completion_chars
        if truncated:
            text = text[-self.params.max_completion_chars :]
        answer = extract_answer(text, last_number=self.params.last_number)
        if answer is None:
            return Score.ok(False, "no final answer found (no \\boxed{}, <answer>, ####, 'the answer is' or number)")
        if answer.source in _REFUSALS:
            return Score.ok(False, _REFUSALS[answer.source], {"source": answer.source})
        if len(answer.text) > self.params.max_answer_chars:
            return Score.ok(
                False,
                f"the extracted answer is {len(answer.text):,} characters long "
                f"(max_answer_chars={self.params.max_answer_chars}); not compared",
                {"source": answer.source},
            )
        parsed = self.answers.get(answer.text)
        if parsed is None:
            parsed = _parse(answer.text)
            self.answers.put(answer.text, parsed)
        if not parsed.canonical:
            return Score.ok(
                False,
                f"the answer found (from {_SOURCES[answer.source]}) is empty once normalised",
                {"extracted": answer.text, "source": answer.source},
            )
        golds = [self._gold(reference) for reference in references]
        pending = Pending(answer, parsed.canonical, golds, truncated=truncated)
        for gold in golds:
            outcome = self._fast(gold, parsed)
            pending.outcomes.append(outcome)
            if outcome is not None and outcome[0]:
                break  # one matching reference is enough; the rest need no comparison
        if any(o is not None and o[0] for o in pending.outcomes):
            pending.outcomes = [o if o is not None else (False, "not compared") for o in pending.outcomes]
        return pending

    def _gold(self, reference: str) -> Parsed:
        gold = self.golds.get(reference)
        if gold is None:
            gold = _parse(extract_reference(reference).text)
            self.golds.put(reference, gold)
        return gold

    def _fast(self, gold: Parsed, pred: Parsed) -> Outcome | None:
        if gold.unit and pred.unit and gold.unit != pred.unit and "clock" not in (gold.unit, pred.unit):
            return False, f"different units ({gold.unit!r} and {pred.unit!r})"
        if pred.canonical == gold.canonical:
            return True, "same text"
        key = (gold.canonical, pred.canonical)
        memoised = self.memo.get(key)
        if memoised is not None:
            return memoised
        tol = self.tolerance
        same, how = decide(gold.canonical, pred.canonical, lambda g, p: item_verdict(g, p, tol))
        if same is not None:
            outcome: Outcome = (same, how)
            self.memo.put(key, outcome)
            return outcome
        return None

    def _symbolic(self, pairs: list[tuple[str, str]]) -> list[Outcome]:
        """Outcomes of undecided (reference, answer) pairs: guarded, then compared in parallel in workers."""
        outcomes: list[Outcome | None] = [self._refuse(gold, pred) for gold, pred in pairs]
        if self.backend == "missing":
            note = f"backend {self.params.backend!r} is not installed: pip install 'evalsi[math]'"
            return [o if o is not None else (None, note) for o in outcomes]
        if self.backend == "none":
            return [o if o is not None else (False, self._no_backend_note()) for o in outcomes]
        try:
            pool = self._pool()
            futures = {i: self._submit(pool, pair) for i, pair in enumerate(pairs) if outcomes[i] is None}
            for index, future in futures.items():
                outcome = self._collect(future)
                # The worker died: again, in case its template was killed under it (a retry sent before the pool
                # noticed can land on the dying template too, so twice at most).
                for _ in range(RETRIES_AFTER_DEATH):
                    if outcome[0] is not None:
                        break
                    outcome = self._collect(self._submit(pool, pairs[index]))
                outcomes[index] = outcome
                if outcome[0] is not None:
                    self.memo.put(pairs[index], outcome)
        except Exception as exc:  # the pool could not start: every pending comparison errors, with the cause
            note = f"the symbolic worker pool failed: {type(exc).__name__}: {exc}"
            return [o if o is not None else (None, note) for o in outcomes]
        return [o if o is not None else (None, "internal: no outcome") for o in outcomes]

    def _submit(self, pool: SymbolicPool, pair: tuple[str, str]) -> Future[Any]:
        args = (self.backend, *pair, self.params.float_rounding, self.params.significant_digits)
        return pool.submit(compare, args, self.params.timeout)

    def _collect(self, future: Future[Any]) -> Outcome:
        try:
            same, note = future.result()
            return bool(same), note
        except TimeoutError:
            # Deterministic enough to memoise: GRPO repeats answers, and a pathological one must cost once.
            return False, f"symbolic comparison timed out after {self.params.timeout:g}s of CPU time"
        except Exception as exc:
            return None, f"the symbolic worker failed: {type(exc).__name__}: {exc}"

    def _refuse(self, gold: str, pred: str) -> Outcome | None:
        """A verdict for answers too long or too deeply nested to parse safely; None for the rest."""
        limit = self.params.max_nesting
        for text, what in ((pred, "answer"), (gold, "reference")):
            if len(text) > self.params.max_answer_chars:
                return False, (
                    f"the {what} is {len(text):,} characters long "
                    f"(max_answer_chars={self.params.max_answer_chars}); not parsed"
                )
            if text.count("{") + text.count("(") + text.count("[") > limit:
                depth = nesting_depth(text)
                if depth > limit:
                    return False, f"the {what} is nested {depth} deep (max_nesting={limit}); not parsed"
            digits = huge_power(text)
            if digits is not None:
                size = f"10^{math.log10(digits):.0f}" if math.isfinite(digits) and digits > 0 else "unboundedly many"
                return False, f"the {what} holds a power of about {size} digits; not evaluated"
        return None

    def _no_backend_note(self) -> str:
        hint = "" if self.params.backend == "none" else "; pip install 'evalsi[math]' for symbolic equivalence"
        return f"differs as text and numbers (no symbolic backend{hint})"

    def _score(self, pending: Pending) -> Score:
        details: dict[str, Any] = {
            "extracted": pending.answer.text,
            "source": pending.answer.source,
            "normalised": pending.canonical,
        }
        if pending.truncated:
            details["truncated"] = True
        where = _SOURCES[pending.answer.source]
        errors: list[str] = []
        for gold, outcome in zip(pending.golds, pending.outcomes, strict=False):
            same, how = outcome if outcome is not None else (None, "not compared")
            if same:
                details.update(reference=gold.canonical, method=how)
                return Score.ok(
                    True,
                    f"{_show(pending.canonical)} (from {where}) equals the reference {_show(gold.canonical)} ({how})",
                    details,
                )
            if same is None:
                errors.append(how)
        gold = pending.golds[0]
        how = pending.outcomes[0][1] if pending.outcomes[0] is not None else "not compared"
        details.update(reference=gold.canonical, method=how)
        if errors:
            return Score.error(f"could not compare {_show(pending.canonical)} with the reference: {errors[0]}", details)
        return Score.ok(
            False,
            f"{_show(pending.canonical)} (from {where}) differs from the reference {_show(gold.canonical)} ({how})",
            details,
        )


_backends: dict[str, str] = {}


def resolve_backend(requested: str) -> str:
    """The backend that will run: ``auto`` becomes math-verify, sympy or none, by what is installed."""
    if requested not in _backends:
        installed = {
            "math-verify": importlib.util.find_spec("math_verify") is not None,
            "sympy": importlib.util.find_spec("sympy") is not None,
        }
        if requested == "auto":
            _backends[requested] = next((name for name, ok in installed.items() if ok), "none")
        else:
            _backends[requested] = requested if installed.get(requested, True) else "missing"
    return _backends[requested]


def _references(reference: Any) -> list[str]:
    """The reference's acceptable answers, stripped, blank ones left out."""
    return [text.strip() for text in reference_options(reference) if text.strip()]


def _show(text: str) -> str:
    """An answer quoted for a reason: as written (LaTeX backslashes are not doubled), cut at 60 characters."""
    return "'" + (text if len(text) <= 60 else text[:57] + "...") + "'"
