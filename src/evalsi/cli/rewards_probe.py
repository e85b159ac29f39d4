"""``evalsi rewards probe``: score adversarial rollouts built from a spec's own data, before training on it.

Also the ``--probe`` step of ``evalsi rewards score``: the same probes on the data being scored, first.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import orjson
import typer
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.text import Text

from evalsi.cli._console import EXIT_FAILED, EXIT_GATE, EXIT_OK, fail, stderr
from evalsi.cli._tables import number_table
from evalsi.errors import DataError, SpecError
from evalsi.records import Record
from evalsi.rewards import Reward, load, read_rollout_file
from evalsi.rewards.probes import ORACLE, Cell, ComponentReport, OracleCell, ProbeLimits, ProbeReport, probe_reward
from evalsi.specs import load_resources

MAX_ROWS_HELP = "Distinct rows of the data (prompt, reference, test cases) to build probes from."
MAX_ROLLOUTS_HELP = "Most probe and oracle rollouts to score in all."


def probe_command(
    spec: Path = typer.Argument(..., help="A RewardSpec, or a RunSpec (its evaluators, and its dataset as data)."),
    data: Path | None = typer.Option(
        None,
        "--data",
        "-d",
        help="Rollouts or dataset rows: JSONL, a JSON array, or Parquet ('-': stdin). Default: the RunSpec's dataset.",
    ),
    name: str | None = typer.Option(None, "--name", help="Which spec, when the file holds several."),
    max_rows: int = typer.Option(8, "--max-rows", min=1, help=MAX_ROWS_HELP),
    max_rollouts: int = typer.Option(512, "--max-rollouts", min=1, help=MAX_ROLLOUTS_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No table on stderr."),
) -> None:
    """Score probes built from the data's prompts, references and test cases, and the data's right answers.

    Probes are completions that deserve no reward (an empty answer, the prompt echoed, the reference buried in
    junk, every candidate answer at once, the reference in a think block, a megabyte of LaTeX, programs that
    exit early or read their tests, a prompt injection for judges, the bare shell of the format). Which apply
    depends on what each component reads. The oracle is the data's own answers (references, and known-good
    programs such as canonical_solution), which must earn full reward. A table goes to stderr; --json prints
    the report on stdout.

    Exit codes: 0 no probe earned reward and the oracle held; 3 a probe earned a component that checks
    correctness (or the total of a form-only reward), or the oracle failed; 1 the oracle could not be checked
    (a component errored on it); 2 bad usage, spec or data.
    """
    reward, records = load_target(spec, data, name)
    if not records:
        fail(f"{data or spec}: no rows to build probes from")
    report = run_probes(reward, records, ProbeLimits(max_rows=max_rows, max_rollouts=max_rollouts))
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
    if not quiet:
        stderr.print(report_view(report))
    raise typer.Exit(exit_code(report))


def load_target(spec: Path, data: Path | None, name: str | None) -> tuple[Reward, list[Record]]:
    """The reward to probe and the data rows: a RewardSpec with ``--data``, or a RunSpec (its dataset by default).

    Exits 2 on a bad spec or data, naming the file and line.
    """
    try:
        kinds = {resource.kind for resource in load_resources(spec)}
        if "RewardSpec" not in kinds and "RunSpec" in kinds:
            return _run_target(spec, data, name)
        reward = load(spec, name)
        if data is None:
            fail(f"{spec}: a RewardSpec names no dataset; give --data (rollouts or dataset rows)")
        return reward, _records(reward, data)
    except (SpecError, DataError) as exc:
        fail(str(exc))


def _run_target(spec: Path, data: Path | None, name: str | None) -> tuple[Reward, list[Record]]:
    from evalsi.runs import load_run
    from evalsi.runs._driver import load_run_items

    run = load_run(spec, name)
    if data is not None:
        return run.reward, _records(run.reward, data)
    items = load_run_items(run)
    records = [Record("", i.prompt, i.reference, None, i.id, dict(i.metadata)) for i in items]
    return run.reward, records


def _records(reward: Reward, data: Path) -> list[Record]:
    rows, source = read_rollout_file(data)
    filled = [row if ("completion" in row or "output" in row) else {**row, "completion": ""} for row in rows]
    try:
        return reward.records(filled)
    except DataError as exc:
        raise source.locate(exc) from None


def run_probes(reward: Reward, records: Sequence[Record], limits: ProbeLimits) -> ProbeReport:
    """Probe ``reward`` with a status line on stderr while the probes are scored."""
    with stderr.status("probing the reward", spinner="dots"):
        return probe_reward(reward, records, limits=limits)


def exit_code(report: ProbeReport) -> int:
    """3 when a probe earned reward or the oracle failed, 1 when the oracle could not be checked, else 0."""
    if report.hackable or report.oracle_failed:
        return EXIT_GATE
    if report.oracle_errored:
        return EXIT_FAILED
    return EXIT_OK


def report_view(report: ProbeReport) -> RenderableType:
    """The probe table (a row per probe, a column per component and the total), then findings and notes."""
    columns = ["probe", *(f"{c.name} ({c.evaluator}, {c.kind})" for c in report.components), "total"]
    rows: list[list[str]] = []
    for probe in report.probes:
        cells = [_cell(c.cells[probe], c.kind == "correctness") for c in report.components]
        rows.append([probe, *cells, _cell(report.total[probe], report.form_only)])
    rows.append([ORACLE, *(_oracle(c) for c in report.components), _oracle_cell(report.total_oracle, "-")])
    caption = (
        f"{len(report.rows)} rows, {report.cases} rollouts. Cells: rollouts that earned reward / rollouts; "
        "EARNED on a component that checks correctness is a finding; 'pays' on a format or length component is "
        "its job; · the probe was built for other components."
    )
    table = number_table(f"probes of {escape(repr(report.spec))}", columns, (), rows, caption)
    parts: list[RenderableType] = [table]
    findings = report.findings()
    if findings:
        parts.append(Text("findings:", style="bold red"))
        parts += [Text(f"  - {f}") for f in findings]
        parts += _examples(report)
    else:
        parts.append(Text("no probe earned reward, and the data's right answers earn full reward", style="green"))
    parts += [Text(f"note: {n}", style="yellow") for n in report.notes]
    return Group(*parts)


def _cell(cell: Cell, flagged: bool) -> str:
    if not cell.cases:
        return "[dim]-[/]"
    parts: list[str] = []
    if cell.earned:
        style, word = ("bold red", "EARNED") if flagged else ("dim", "pays")
        best = f" (max {cell.best:g})" if cell.best is not None else ""
        parts.append(f"[{style}]{word} {cell.earned}/{cell.cases}{best}[/]")
    elif cell.skipped == cell.cases:
        parts.append("[dim]skipped[/]")
    elif cell.applies:
        parts.append(f"[green]0/{cell.cases}[/]")
    else:
        parts.append("[dim]·[/]")
    if cell.errored:
        parts.append(f"[yellow]err {cell.errored}[/]")
    return " ".join(parts)


def _oracle(component: ComponentReport) -> str:
    return _oracle_cell(component.oracle, "n/a")


def _oracle_cell(cell: OracleCell | None, missing: str) -> str:
    if cell is None:
        return f"[dim]{missing if missing == 'n/a' else '-'}[/]"
    if cell.failed:
        return f"[bold red]FAILS {cell.failed}/{cell.rows}[/]"
    if cell.errored:
        return f"[yellow]err {cell.errored}/{cell.rows}[/]"
    return f"[green]full {cell.rows}/{cell.rows}[/]"


def _examples(report: ProbeReport) -> list[RenderableType]:
    out: list[RenderableType] = []
    for component in report.components:
        for name in component.hacked_by:
            example = component.cells[name].example
            if example is not None:
                out.append(
                    Text(
                        f"    {component.name} <- {name} ({example.variant}), row {example.row}: value "
                        f"{example.value!r}, {example.reason or 'no reason'}; completion: {example.completion!r}",
                        style="dim",
                    )
                )
        oracle = component.oracle
        if oracle is not None and oracle.failed and oracle.example is not None:
            example = oracle.example
            out.append(
                Text(
                    f"    {component.name} on the right answer ({example.variant}), row {example.row}: value "
                    f"{example.value!r}, {example.reason or 'no reason'}",
                    style="dim",
                )
            )
    return out
