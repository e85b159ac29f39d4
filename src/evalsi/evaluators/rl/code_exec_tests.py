"""``code-exec-tests``: run the completion's program against the record's test cases in the sandbox.

Each case runs in its own process, forked from a warm server inside the sandbox; a batch's programs are spread
over the sandbox pool (one sandbox per core), and a program's cases over the sandboxes left idle (a rollout
scored alone). Stdin/stdout cases are compared on the host; assert and call cases are judged by a tester process
whose verdict carries a per-run nonce on a channel the program never holds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from evalsi.errors import SandboxUnavailableError
from evalsi.evaluators._base import Evaluator, Params, ScoreContext
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import Score
from evalsi.evaluators.rl._code_cases import CASE_FIELDS, CaseError, TestCase, test_cases
from evalsi.evaluators.rl._code_compare import judge
from evalsi.evaluators.rl._code_extract import called_names, extract_program
from evalsi.records import Record
from evalsi.sandbox import CaseOutcome, Limits, close_shared_pools, require, shared_pool


class CodeExecTestsParams(Params):
    """How strictly, and under which limits, the program is tested."""

    min_isolation: Literal["process", "namespaced", "gvisor"] = "namespaced"
    """The lowest sandbox rung allowed (a RewardSpec's ``sandbox.minIsolation``); never silently lowered."""
    all_or_nothing: bool = False
    """Score 1 only when every case passes, else 0 (instead of the fraction passed)."""
    timeout: float = Field(default=10.0, gt=0, le=600)
    """Wall-clock seconds per case. CPU time is capped a second above it, so a busy loop ends as 'timeout' and
    only a program burning several cores at once ends as 'cpu time limit'."""
    memory_mb: int = Field(default=512, ge=32, le=65536)
    """Address-space limit per case, in MiB."""
    max_processes: int = Field(default=16, ge=1, le=4096)
    """Processes and threads a case may run at once."""
    max_output_kb: int = Field(default=1024, ge=1, le=1 << 20)
    """stdout beyond this many KiB is truncated and the case fails with 'output limit'."""
    float_tolerance: float = Field(default=0.0, ge=0, le=1)
    """When > 0, numbers in the output (or returned values) may differ by this much, relative to max(1, |x|)."""
    fresh_interpreter: bool = False
    """The slow baseline: a new sandbox and interpreter for every case instead of a fork of the warm server."""
    continue_prompt: bool = True
    """HumanEval style: when the program does not define ``entry_point`` but a text prompt does, run prompt +
    program (the completion continues the prompt's signature and docstring)."""

    def limits(self) -> Limits:
        """The per-case sandbox limits these params describe."""
        return Limits(
            wall_time=self.timeout,
            cpu_time=math.ceil(self.timeout) + 1,
            memory_bytes=self.memory_mb << 20,
            max_processes=self.max_processes,
            max_output_bytes=self.max_output_kb << 10,
        )


@register
class CodeExecTests(Evaluator[CodeExecTestsParams]):
    """The fraction of test cases the program passes (1 or 0 with ``all_or_nothing``); skipped without cases.

    The program is cut out of the completion by its markdown code fences (``` or ~~~, closed or left open by a
    truncated completion; CRLF or LF). The last block wins within the first of these tiers that has one:

    1. a block tagged python (python, py, python3 or py3 in any case, attributes allowed: ```python title="a.py")
       that defines a function the tests call (entry_point, fn_name, or a function the test_list asserts call);
    2. an untagged block that defines one;
    3. any block tagged python;
    4. any untagged block;
    5. a block tagged with another language (text, bash, json...) whose text parses as Python;
    6. without any of these, the whole completion; when that is not valid Python (prose around unfenced code),
       the longest stretch from a line that opens like a program (an import, def, class, or an assignment
       from input()) to the furthest line that keeps it valid Python. An indented completion (continuing a
       HumanEval prompt) is kept whole.

    So sample input/output in untagged or text blocks, and a usage example after the solution, are not run as
    the program.
    """

    name = "code-exec-tests"
    summary = "Runs the program against test cases in the sandbox, each case in its own process."
    params_model = CodeExecTestsParams
    reads = ("completion", "prompt", *(f"metadata.{key}" for key in CASE_FIELDS))
    runs_code = True
    pack = "rl"
    cache_version = "2"  # the program extraction rule above: scores cached under the old rule are not reused

    def score(self, record: Record, params: CodeExecTestsParams, ctx: ScoreContext) -> Score:
        """One record; see :meth:`score_batch`."""
        return self.score_batch([record], params, ctx)[0]

    def score_batch(self, records: Sequence[Record], params: CodeExecTestsParams, ctx: ScoreContext) -> list[Score]:
        """Every record's programs run in parallel on the sandbox pool of the chosen rung."""
        jobs: list[tuple[str, list[TestCase]] | Score] = [_prepare(r, params.continue_prompt) for r in records]
        todo = [(i, job) for i, job in enumerate(jobs) if not isinstance(job, Score)]
        if not todo:
            return [job for job in jobs if isinstance(job, Score)]
        try:
            rung = require(params.min_isolation)
        except SandboxUnavailableError as exc:
            return [job if isinstance(job, Score) else Score.error(str(exc)) for job in jobs]
        pool = shared_pool(rung)
        limits = params.limits()

        def run(job: tuple[str, list[TestCase]]) -> list[CaseOutcome]:
            source, tests = job
            return pool.run(source, [t.case for t in tests], limits, fresh=params.fresh_interpreter)

        outcomes = pool.map(run, [job for _, job in todo])
        out: list[Score] = [job if isinstance(job, Score) else Score.error("internal: not run") for job in jobs]
        for (index, (_, tests)), results in zip(todo, outcomes, strict=True):
            out[index] = _score(tests, results, params, rung)
        return out

    def close(self) -> None:
        """Stop the sandboxes (they are shared by every code-running component of this process)."""
        close_shared_pools()


def _prepare(record: Record, continue_prompt: bool) -> tuple[str, list[TestCase]] | Score:
    """The program and its cases, or the score that says why there is nothing to run."""
    try:
        tests = test_cases(record.metadata)
    except CaseError as exc:
        return Score.error(str(exc))
    if not tests:
        return Score.skipped("no test cases (tests, inputs/outputs, test_list or test) in the rollout")
    program = extract_program(record.completion_text, called_names(record.metadata))
    entry = record.metadata.get("entry_point")
    if continue_prompt and isinstance(entry, str) and isinstance(record.prompt, str):
        program = continued_program(record.prompt, program, entry)
    return program, tests


def continued_program(prompt: str, program: str, entry_point: str) -> str:
    """``prompt + program`` when only the prompt defines ``entry_point``, else the program as it is.

    A HumanEval completion often continues the prompt's signature and docstring rather than repeating them.
    """
    defines = re.compile(rf"^\s*(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", re.MULTILINE)
    if defines.search(program) or not defines.search(prompt):
        return program
    return prompt + program if prompt.endswith("\n") or program.startswith("\n") else prompt + "\n" + program


def _score(tests: list[TestCase], outcomes: list[CaseOutcome], params: CodeExecTestsParams, rung: str) -> Score:
    if len(outcomes) != len(tests):
        return Score.error(f"the sandbox returned {len(outcomes)} results for {len(tests)} cases")
    infra = next((o.run for o in outcomes if o.run.infrastructure), None)
    if infra is not None:
        return Score.error(f"the {rung} sandbox failed: {infra.detail}")
    passed = 0
    first: dict[str, Any] | None = None
    for index, (test, outcome) in enumerate(zip(tests, outcomes, strict=True)):
        why = judge(test, outcome, params.float_tolerance)
        if why is None:
            passed += 1
        elif first is None:
            first = {"case": index, "label": test.label, "reason": why}
    total = len(tests)
    value = float(passed == total) if params.all_or_nothing else passed / total
    details: dict[str, Any] = {"passed": passed, "total": total, "isolation": rung}
    reason = None
    if first is not None:
        details["first_failure"] = first
        reason = f"case {first['case']} ({first['label']}): {first['reason']}"
    return Score.ok(value, reason, details)
