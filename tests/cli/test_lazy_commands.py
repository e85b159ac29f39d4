"""The ``evalsi`` command imports a command's module only when that command runs (or ``--help`` lists them all).

``evalsi run`` pays neither for the server, nor the trainer integrations, nor the viewer at start-up; help texts,
usage errors and "did you mean" suggestions are unchanged.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from typer.testing import CliRunner

from evalsi.cli.main import app

COMMANDS = [
    "run",
    "compare",
    "view",
    "local-test",
    "rewards",
    "evaluators",
    "datasets",
    "jobs",
    "sandbox",
    "server",
    "checkpoints",
]
OTHER_COMMAND_MODULES = [
    "evalsi.cli.rewards",
    "evalsi.cli.evaluators",
    "evalsi.cli.datasets",
    "evalsi.cli.jobs",
    "evalsi.cli.sandbox",
    "evalsi.cli.server",
    "evalsi.cli.checkpoints",
    "evalsi.cli.compare",
    "evalsi.cli.view",
    "evalsi.cli.local_test",
    "evalsi.training",
    "evalsi.server",
    "evalsi.view",
]

PROBE = """
import json, sys
from evalsi.cli.main import main
sys.argv = ["evalsi", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def modules_loaded_by(*argv: str) -> set[str]:
    """The modules a fresh ``evalsi`` process has imported once ``argv`` has run."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=False, timeout=300
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_run_imports_no_other_command() -> None:
    loaded = modules_loaded_by("run", "--help")
    assert "evalsi.cli.run" in loaded
    assert [name for name in OTHER_COMMAND_MODULES if name in loaded] == []


def test_a_group_is_imported_when_invoked() -> None:
    loaded = modules_loaded_by("sandbox", "--help")
    assert "evalsi.cli.sandbox" in loaded
    assert "evalsi.cli.server" not in loaded and "evalsi.cli.run" not in loaded


def test_help_lists_every_command_in_order() -> None:
    result = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert result.exit_code == 0
    rows = [re.match(r"│ (\S+)\s{2,}\S", line) for line in result.output.splitlines()]
    listed = [row.group(1) for row in rows if row is not None and row.group(1) in COMMANDS]
    assert listed == COMMANDS


def test_nested_groups_and_commands_still_resolve() -> None:
    result = CliRunner().invoke(app, ["server", "token", "--help"])
    assert result.exit_code == 0, result.output
    assert "create" in result.output


def test_an_unknown_command_is_matched_against_every_command() -> None:
    result = CliRunner().invoke(app, ["checkpoint"])
    assert result.exit_code == 2
    assert "Did you mean 'checkpoints'?" in result.output
