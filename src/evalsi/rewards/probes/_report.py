"""What probing found: per component, which probes earned it, and whether the data's right answers did.

A finding is a correctness component (one that reads a reference, test cases, code it runs or a model) earned by
a probe, a spec whose total is earned by probes while nothing in it checks correctness (a format-only reward),
or an oracle that fails: a right answer of the data that no form earns full reward with.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from evalsi.rewards.probes._reads import Key, Kind

PREVIEW_CHARS = 160


def _fields_json(cell: Example | Cell | OracleCell, skip: str = "") -> dict[str, Any]:
    """A flat report object's JSON form: its fields in order (but ``skip``), an ``example`` as its own JSON."""
    out: dict[str, Any] = {}
    for item in fields(cell):
        if item.name != skip:
            value = getattr(cell, item.name)
            out[item.name] = value.to_json() if isinstance(value, Example) else value
    return out


@dataclass(frozen=True)
class Example:
    """One probe rollout, as shown in a report: where its row came from, its variant, its score."""

    row: int
    """The index of the rollout (or dataset row) the probe was built from."""
    variant: str
    value: float | bool | None
    status: str
    reason: str | None
    completion: str
    """The start of the probe's completion."""

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return _fields_json(self)


@dataclass
class Cell:
    """One probe against one component (or against the total): how many of its rollouts earned, errored, skipped."""

    probe: str
    applies: bool
    """The component reads what the probe attacks (it was built for components like this one)."""
    cases: int = 0
    earned: int = 0
    errored: int = 0
    skipped: int = 0
    best: float | None = None
    """The highest value the probe's rollouts scored."""
    example: Example | None = None
    """The first rollout that earned (else the first that errored)."""

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return _fields_json(self, skip="probe")


@dataclass
class OracleCell:
    """The oracle against one component (or the gates): rows checked, and those whose best form fell short."""

    rows: int = 0
    failed: int = 0
    errored: int = 0
    worst: float | None = None
    """The lowest best-of-forms value over the rows checked."""
    example: Example | None = None
    """The first row that failed (its best form), else the first that errored."""

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return _fields_json(self)


@dataclass
class ComponentReport:
    """One component: what it reads, and each probe's and the oracle's outcome against it."""

    name: str
    evaluator: str
    kind: Kind
    keys: list[Key]
    weight: float
    gate: bool
    on_error: str = "raise"
    cells: dict[str, Cell] = field(default_factory=dict)
    oracle: OracleCell | None = None
    """None when no oracle applies (a shape component, a model, no reference or solution in the data)."""
    decided: int = 0
    """Probe rollouts this component scored (not skipped): 0 means the data gave it nothing to check."""

    @property
    def hacked_by(self) -> list[str]:
        """The probes that earned this component, when it checks correctness (else none: form is its job)."""
        if self.kind != "correctness":
            return []
        return [name for name, cell in self.cells.items() if cell.earned]

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "name": self.name,
            "evaluator": self.evaluator,
            "kind": self.kind,
            "reads": sorted(self.keys),
            "weight": self.weight,
            "gate": self.gate,
            "onError": self.on_error,
            "hackedBy": self.hacked_by,
            "decided": self.decided,
            "probes": {name: cell.to_json() for name, cell in self.cells.items()},
            "oracle": self.oracle.to_json() if self.oracle else None,
        }


@dataclass
class ProbeReport:
    """Everything probing one spec found."""

    spec: str
    rows: list[int]
    """Indices of the rollouts (or dataset rows) the probes were built from."""
    cases: int
    """Probe and oracle rollouts scored."""
    probes: dict[str, str]
    """Each probe used, with what it does."""
    components: list[ComponentReport]
    total: dict[str, Cell]
    """Each probe against the total: a rollout earns when its total is positive and not gated."""
    total_oracle: OracleCell | None = None
    """Rows where no one form of the right answer passes every gate and scores 1 on every component it answers."""
    form_only: bool = False
    """No component checked correctness on this data: every total is paid for form alone."""
    notes: list[str] = field(default_factory=list)

    @property
    def total_hacked_by(self) -> list[str]:
        """The probes that earned a total, when nothing in the spec checks correctness."""
        if not self.form_only:
            return []
        return [name for name, cell in self.total.items() if cell.earned]

    @property
    def hackable(self) -> bool:
        """A probe earned a correctness component, or the total of a form-only reward."""
        return bool(self.total_hacked_by) or any(c.hacked_by for c in self.components)

    @property
    def oracle_failed(self) -> bool:
        """A right answer of the data earned less than full reward on a component, or no form earned the total."""
        cells = [c.oracle for c in self.components if c.oracle is not None]
        if self.total_oracle is not None:
            cells.append(self.total_oracle)
        return any(cell.failed for cell in cells)

    @property
    def oracle_errored(self) -> bool:
        """The oracle could not be checked on some row.

        A component errored on every form: the sandbox is unavailable, a judge does not answer.
        """
        return any(c.oracle is not None and c.oracle.errored for c in self.components)

    def findings(self) -> list[str]:
        """One sentence per problem found, for logs and summaries."""
        out: list[str] = []
        for component in self.components:
            for name in component.hacked_by:
                cell = component.cells[name]
                out.append(
                    f"component {component.name!r} ({component.evaluator}) is earned by probe {name!r} "
                    f"on {cell.earned} of {cell.cases} rollouts"
                )
            oracle = component.oracle
            if oracle is not None and oracle.failed:
                out.append(
                    f"component {component.name!r} ({component.evaluator}) gives the data's right answer less than "
                    f"full reward on {oracle.failed} of {oracle.rows} rows (lowest {_number(oracle.worst)})"
                )
        if self.total_hacked_by:
            out.append(
                "no component checks correctness on this data (a reference, test cases, code or a model), and the "
                f"total is earned by probes {', '.join(map(repr, self.total_hacked_by))}: a form-only reward"
            )
        oracle = self.total_oracle
        if oracle is not None and oracle.failed:
            why = f" ({oracle.example.reason})" if oracle.example is not None and oracle.example.reason else ""
            out.append(
                f"no form of the data's right answer earns the full total on {oracle.failed} of {oracle.rows} rows{why}"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        """JSON form (``evalsi rewards probe --json``)."""
        return {
            "spec": self.spec,
            "hackable": self.hackable,
            "oracleFailed": self.oracle_failed,
            "oracleErrored": self.oracle_errored,
            "formOnly": self.form_only,
            "findings": self.findings(),
            "notes": self.notes,
            "rows": self.rows,
            "cases": self.cases,
            "probes": self.probes,
            "components": [c.to_json() for c in self.components],
            "total": {name: cell.to_json() for name, cell in self.total.items()},
            "totalOracle": self.total_oracle.to_json() if self.total_oracle else None,
        }


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
