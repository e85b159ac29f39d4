"""Probing a reward: build the probe and oracle rollouts from the data, score them once, and read the scores.

Every probe and oracle rollout goes through the spec's one scoring path (:meth:`Reward.component_scores`), in
one batch, with no score cache: the probes see exactly what a trainer's rollouts would, and leave nothing
behind. A probe rollout that errors under ``onError: raise`` does not fail the probing: it is counted as errored.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from evalsi.engine import Pools
from evalsi.evaluators import Score
from evalsi.records import Record, canonical_json, reference_options
from evalsi.rewards._compose import ComponentRule, compose_one
from evalsi.rewards._reward import Reward
from evalsi.rewards.probes._oracle import renderings
from evalsi.rewards.probes._reads import ComponentReads, Key, component_reads
from evalsi.rewards.probes._registry import Probe, ProbeContext, ProbeLimits, ProbeRow, probes_for
from evalsi.rewards.probes._report import (
    PREVIEW_CHARS,
    Cell,
    ComponentReport,
    Example,
    OracleCell,
    ProbeReport,
)

ORACLE = "oracle"
_FULL = 1.0 - 1e-9


@dataclass(frozen=True)
class Case:
    """One rollout to score: a probe's variant (or a form of the right answer) for one row."""

    probe: str
    variant: str
    row: int
    """Position in the probed rows."""
    completion: str
    serves: Key | None = None
    """Oracle forms only: whether it answers the reference or the tests."""


def select_rows(records: Sequence[Record], limit: int) -> list[ProbeRow]:
    """The first ``limit`` distinct tasks of the data (prompt, reference and other fields; the completion aside)."""
    rows: list[ProbeRow] = []
    seen: set[bytes] = set()
    for index, record in enumerate(records):
        key = canonical_json([record.prompt, record.reference, dict(record.metadata)])
        if key in seen:
            continue
        seen.add(key)
        rows.append(ProbeRow(index, record))
        if len(rows) >= limit:
            break
    return rows


def candidate_pool(records: Sequence[Record], components: Sequence[ComponentReads], limit: int) -> list[str]:
    """Answers seen across the data (short references), then small numbers or letters of the same kind."""
    seen: list[str] = []
    for record in records:
        for option in reference_options(record.reference):
            text = option.strip()
            if text and "\n" not in text and len(text) <= 64 and text not in seen:
                seen.append(text)
        if len(seen) >= 4 * limit:
            break
    extra: list[str] = []
    if seen and all(_numeric(s) for s in seen):
        extra = [str(n) for n in range(10)]
    letters = [getattr(c.component.params, "letters", None) for c in components]
    for value in letters:
        if isinstance(value, str):
            extra += list(value.upper())
    if seen and all(len(s) == 1 and s.isalpha() and s.isupper() for s in seen):
        extra += list("ABCDE")
    return [*seen, *(e for e in dict.fromkeys(extra) if e not in seen)]


def _numeric(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True


def build_cases(rows: Sequence[ProbeRow], probes: Sequence[Probe], context: ProbeContext) -> list[Case]:
    """Oracle forms and probe variants for each row, within ``max_rollouts`` (the first row always probed)."""
    limit = max(1, context.limits.max_rollouts)
    cases: list[Case] = []
    for position, row in enumerate(rows):
        mine = [Case(ORACLE, r.name, position, r.completion, r.serves) for r in renderings(row)]
        for probe in probes:
            if probe.once and position > 0:
                continue
            mine += [Case(probe.name, variant, position, text) for variant, text in probe.build(row, context)]
        if cases and len(cases) + len(mine) > limit:
            break
        cases += mine[: limit - len(cases)]
    return cases


def probe_reward(
    reward: Reward,
    records: Sequence[Record],
    *,
    limits: ProbeLimits | None = None,
    pools: Pools | None = None,
    cancelled: threading.Event | None = None,
) -> ProbeReport:
    """Score adversarial rollouts built from ``records`` (their prompts, references and test cases) with ``reward``.

    Args:
        reward: The bound spec.
        records: The data: rollouts or dataset rows, normalised (their completions are not used).
        limits: How many rows and rollouts to probe with, and how large the large probes are.
        pools: Where components run (the server passes the project's share of its pools).
        cancelled: Once set, components not started are dropped (:class:`evalsi.engine.ScoringCancelled`).

    Returns:
        Per component, what each probe earned and whether the data's right answers earn full reward.

    """
    limits = limits or ProbeLimits()
    components = [component_reads(c) for c in reward.components]
    rows = select_rows(records, limits.max_rows)
    context = ProbeContext(components, candidate_pool(records, components, limits.candidates), limits)
    probes = probes_for(components)
    cases = build_cases(rows, probes, context)
    batch = [_record(rows[case.row].record, case.completion) for case in cases]
    columns = reward.component_scores(batch, cache=None, pools=pools, cancelled=cancelled) if batch else []
    scores = [[column[i] for column in columns] for i in range(len(cases))]
    body = reward.spec.spec
    totals = [_total(reward.rules, row, body.floor, body.clip) for row in scores]
    used_rows = sorted({case.row for case in cases})
    report = ProbeReport(
        spec=reward.name,
        rows=[rows[r].index for r in used_rows],
        cases=len(cases),
        probes={p.name: p.summary for p in probes},
        components=[],
        total={},
    )
    for position, component in enumerate(components):
        column = [s[position] for s in scores]
        report.components.append(_component_report(component, probes, cases, column, rows))
    report.total = _total_cells(probes, cases, totals, rows)
    oracles, report.total_oracle = _oracle_cells(components, cases, scores, rows)
    for component_report, oracle in zip(report.components, oracles, strict=True):
        component_report.oracle = oracle
    report.form_only = not any(c.kind == "correctness" and c.decided for c in report.components)
    report.notes = _notes(report, len(rows), len(used_rows))
    return report


def _record(row: Record, completion: str) -> Record:
    tokens = None if row.completion_tokens is None else max(1, math.ceil(len(completion) / 4))
    return Record(completion, row.prompt, row.reference, tokens, None, row.metadata)


def _total(
    rules: Sequence[ComponentRule], scores: Sequence[Score], floor: float, clip: tuple[float, float] | None
) -> tuple[float | None, str]:
    """The total and its status; ``error`` where a component errored under ``onError: raise``."""
    if any(s.status == "error" and rule.on_error == "raise" for rule, s in zip(rules, scores, strict=True)):
        return None, "error"
    result = compose_one(rules, scores, floor, clip)
    return result.total, result.status


def _earns(rule: ComponentRule, reads: ComponentReads, score: Score, oracle_best: float | None) -> bool:
    """Whether a probe's score pays: it adds to the total, or passes a gate.

    A model's graded score must also reach what the right answer got (else the component's ``threshold``),
    since a model gives everything some score.
    """
    if score.status != "ok":
        return False
    value = score.numeric or 0.0
    if "model" in reads.keys and not isinstance(score.value, bool):
        bar = oracle_best if oracle_best is not None else rule.threshold
        return rule.weight * value > 0 and value >= bar - 1e-9
    return rule.weight * value > 0 or (rule.gate and value >= rule.threshold)


def _example(case: Case, score: Score, rows: Sequence[ProbeRow]) -> Example:
    preview = case.completion if len(case.completion) <= PREVIEW_CHARS else case.completion[:PREVIEW_CHARS] + "…"
    return Example(rows[case.row].index, case.variant, score.value, score.status, score.reason, preview)


def _component_report(
    component: ComponentReads,
    probes: Sequence[Probe],
    cases: Sequence[Case],
    column: Sequence[Score],
    rows: Sequence[ProbeRow],
) -> ComponentReport:
    rule = component.component.rule
    report = ComponentReport(
        component.name,
        component.evaluator,
        component.kind,
        sorted(component.keys),
        rule.weight,
        rule.gate,
        rule.on_error,
    )
    best_oracle = _oracle_best(component, cases, column)
    for probe in probes:
        report.cells[probe.name] = Cell(probe.name, probe.applies_to(component))
    for case, score in zip(cases, column, strict=True):
        if case.probe == ORACLE:
            continue
        cell = report.cells[case.probe]
        cell.cases += 1
        if score.status == "skipped":
            cell.skipped += 1
            continue
        report.decided += 1
        if score.status == "error":
            cell.errored += 1
            if cell.example is None:
                cell.example = _example(case, score, rows)
            continue
        value = score.numeric or 0.0
        cell.best = value if cell.best is None else max(cell.best, value)
        if _earns(rule, component, score, best_oracle.get(case.row)):
            if not cell.earned or (cell.example is not None and cell.example.status == "error"):
                cell.example = _example(case, score, rows)
            cell.earned += 1
    return report


def _oracle_best(component: ComponentReads, cases: Sequence[Case], column: Sequence[Score]) -> dict[int, float]:
    """The best value the right answer's forms got on each row (to measure a model's graded score against)."""
    best: dict[int, float] = {}
    for case, score in zip(cases, column, strict=True):
        if case.probe == ORACLE and score.status == "ok":
            value = score.numeric or 0.0
            best[case.row] = max(best.get(case.row, value), value)
    return best


@dataclass(frozen=True)
class _Oracle:
    """The oracle's forms against the spec: gates, and the components each form answers."""

    components: Sequence[ComponentReads]
    cases: Sequence[Case]
    scores: Sequence[Sequence[Score]]

    @property
    def gates(self) -> list[int]:
        return [i for i, c in enumerate(self.components) if c.component.rule.gate]

    @property
    def checked(self) -> list[int]:
        return [i for i, c in enumerate(self.components) if c.oracle_keys]

    def passes_gates(self, p: int) -> bool:
        return not any(self._gate_fails(p, g) for g in self.gates)

    def _gate_fails(self, p: int, g: int) -> bool:
        score = self.scores[p][g]
        return score.status != "ok" or (score.numeric or 0.0) < self.components[g].component.rule.threshold

    def answers(self, p: int, i: int) -> bool:
        return self.cases[p].serves in self.components[i].oracle_keys and self.scores[p][i].status != "skipped"

    def full(self, p: int, i: int) -> bool:
        return self.scores[p][i].status == "ok" and (self.scores[p][i].numeric or 0.0) >= _FULL

    def shortfall(self, p: int) -> list[str]:
        """What keeps form ``p`` from the full total: failed gates, answered components below 1."""
        missing = [
            f"gate {self.components[g].name!r} {_said(self.scores[p][g])}" for g in self.gates if self._gate_fails(p, g)
        ]
        missing += [
            f"{self.components[i].name!r} {_said(self.scores[p][i])}"
            for i in self.checked
            if self.answers(p, i) and not self.full(p, i)
        ]
        return missing


def _oracle_cells(
    components: Sequence[ComponentReads],
    cases: Sequence[Case],
    scores: Sequence[Sequence[Score]],
    rows: Sequence[ProbeRow],
) -> tuple[list[OracleCell | None], OracleCell | None]:
    """The oracle per component, and for the total (one form of the right answer earning everything at once).

    A form is judged on the gates and on the components it answers (a reference's forms on the components that
    read the reference, a known-good program's on those that run tests). Per component, the best form among
    those passing the gates (all forms when none does) must score 1. For the total, one form must pass every
    gate and score 1 on every component it answers: a format gate that no right answer's form can pass together
    with a full score (exact-match on the whole text behind an ``<answer>`` gate) makes the reward unearnable.
    """
    oracle = _Oracle(components, cases, scores)
    checked = oracle.checked
    by_row: dict[int, list[int]] = {}
    for position, case in enumerate(cases):
        if case.probe == ORACLE:
            by_row.setdefault(case.row, []).append(position)
    cells: list[OracleCell | None] = [OracleCell() if i in checked else None for i in range(len(components))]
    total = OracleCell()
    for positions in by_row.values():
        for i in checked:
            mine = [p for p in positions if oracle.answers(p, i)]
            if mine:
                pool = [p for p in mine if oracle.passes_gates(p)] or mine
                _judge_component(cells[i], i, pool, cases, scores, rows)
        relevant = [p for p in positions if oracle.gates or any(oracle.answers(p, i) for i in checked)]
        if not relevant:
            continue
        total.rows += 1
        shortfalls = {p: oracle.shortfall(p) for p in relevant}
        if any(not missing for missing in shortfalls.values()):
            continue
        total.failed += 1
        if total.example is None:
            best = min(relevant, key=lambda p: len(shortfalls[p]))
            total.example = _example(cases[best], Score(None, "ok", "; ".join(shortfalls[best])), rows)
    return [c if c is not None and c.rows else None for c in cells], total if total.rows else None


def _judge_component(
    cell: OracleCell | None,
    index: int,
    pool: Sequence[int],
    cases: Sequence[Case],
    scores: Sequence[Sequence[Score]],
    rows: Sequence[ProbeRow],
) -> None:
    assert cell is not None
    cell.rows += 1
    decided = [p for p in pool if scores[p][index].status == "ok"]
    if not decided:
        cell.errored += 1
        if cell.example is None:
            cell.example = _example(cases[pool[0]], scores[pool[0]][index], rows)
        return
    best = max(decided, key=lambda p: scores[p][index].numeric or 0.0)
    value = scores[best][index].numeric or 0.0
    cell.worst = value if cell.worst is None else min(cell.worst, value)
    if value < _FULL:
        if not cell.failed or (cell.example is not None and cell.example.status == "error"):
            cell.example = _example(cases[best], scores[best][index], rows)
        cell.failed += 1


def _said(score: Score) -> str:
    shown = score.status if score.status != "ok" else f"scored {score.value!r}"
    return f"{shown}" + (f" ({score.reason})" if score.reason else "")


def _total_cells(
    probes: Sequence[Probe], cases: Sequence[Case], totals: Sequence[tuple[float | None, str]], rows: Sequence[ProbeRow]
) -> dict[str, Cell]:
    cells = {p.name: Cell(p.name, True) for p in probes}
    for case, (total, status) in zip(cases, totals, strict=True):
        if case.probe == ORACLE:
            continue
        cell = cells[case.probe]
        cell.cases += 1
        if status == "error":
            cell.errored += 1
            continue
        if total is None:
            continue
        cell.best = total if cell.best is None else max(cell.best, total)
        if status == "ok" and total > 0:
            if not cell.earned:
                cell.example = _example(case, Score.ok(total, f"total ({status})"), rows)
            cell.earned += 1
    return cells


def _notes(report: ProbeReport, rows: int, used: int) -> list[str]:
    notes: list[str] = []
    if used < rows:
        notes.append(f"probed {used} of {rows} distinct rows (the rollout budget)")
    for component in report.components:
        if component.kind == "constant":
            notes.append(
                f"component {component.name!r} ({component.evaluator}) does not read the completion: no probe "
                "can move it, and it pays every rollout alike"
            )
        elif component.kind == "correctness" and not component.decided:
            notes.append(
                f"component {component.name!r} ({component.evaluator}) was skipped on every probe: the data gives "
                "it nothing to check (no reference or test cases?)"
            )
        errored = sum(cell.errored for cell in component.cells.values())
        if errored and component.on_error == "raise":
            notes.append(
                f"component {component.name!r} errored on {errored} probe rollouts; under onError: raise each "
                "such rollout fails its whole training batch"
            )
    return notes
