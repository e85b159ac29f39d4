"""``evalsi local-test [--entry] FILE::TEST``: run one evaluation test the way CI does, with evalsi's exit codes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from evalsi.cli._console import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_GATE, fail
from evalsi.cli._entries import choose_entry

_ALREADY_IMPORTED = "ignore:Module already imported so cannot be rewritten; evalsi:pytest.PytestAssertRewriteWarning"
"""pytest would rewrite the asserts of evalsi itself (it registers a pytest plugin), but this command imported
evalsi before starting pytest: that warning says nothing about the user's tests, whose asserts are rewritten."""


def local_test_command(
    test: str | None = typer.Argument(None, help="The evaluation test: path/to/test_file.py::test_name."),
    entry: str | None = typer.Option(
        None,
        "--entry",
        help="The evaluation test, as the argument. Without either, the test files under the current directory "
        "are searched: the only @evaluation_test runs; several are offered on a terminal, listed otherwise.",
    ),
    max_rows: str | None = typer.Option(None, "--max-rows", help="Use only the first N rows (sets EVALSI_MAX_ROWS)."),
    num_runs: int | None = typer.Option(None, "--num-runs", help="Repetitions of every rollout (EVALSI_NUM_RUNS)."),
    threshold: str | None = typer.Option(
        None, "--passed-threshold", help="A number or JSON {success, standard_error} (EVALSI_PASSED_THRESHOLD)."
    ),
) -> None:
    """Run one evaluation test with pytest; exit 0 when it passes, 3 below its threshold, 1 on another failure.

    The results are stored locally (EVALSI_RESULTS_DB, default .evalsi/results.sqlite).
    """
    if test is not None and entry is not None and test != entry:
        fail(f"the argument {test!r} and --entry {entry!r} name different tests: give one")
    chosen = test or entry or choose_entry(Path("."), where="the current directory", confirm_one=False)
    try:
        import pytest
    except ModuleNotFoundError:
        fail("local-test runs pytest: pip install pytest")
    arguments = [chosen, "-q", "-s", "-p", "no:cacheprovider", "-W", _ALREADY_IMPORTED]
    for option, value in (
        ("--evalsi-max-rows", max_rows),
        ("--evalsi-num-runs", num_runs),
        ("--evalsi-passed-threshold", threshold),
    ):
        if value is not None:
            arguments += [option, str(value)]
    recorder = _FailureKinds()
    code = int(pytest.main(arguments, plugins=[recorder]))
    if code == 0:
        return
    if code in (2, 3, 4, 5):  # interrupted, internal error, usage error, nothing collected
        fail(f"pytest could not run {chosen} (exit {code})", EXIT_BAD_INPUT)
    raise typer.Exit(EXIT_GATE if recorder.threshold_only else EXIT_FAILED)


class _FailureKinds:
    """Records whether every failure was an evaluation below its threshold."""

    def __init__(self) -> None:
        self.failures = 0
        self.threshold_failures = 0

    @property
    def threshold_only(self) -> bool:
        return self.failures > 0 and self.failures == self.threshold_failures

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed:
            self.failures += 1
            crash = getattr(report.longrepr, "reprcrash", None)
            if crash is not None and "EvaluationFailed" in str(crash.message):
                self.threshold_failures += 1
