"""The ``evalsi`` command imports a command's module only when that command runs (or ``--help`` lists them all).

``evalsi run`` pays neither for the server, nor the trainer integrations, nor the viewer at start-up; help texts,
usage errors and "did you mean" suggestions are unchanged.
"""

from __future__ import annotations

import gc
import json
import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from evalsi.cli._lazy import resume_collection
from evalsi.cli.main import app
from tests.helpers.openai_server import OpenAIServer

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


def test_a_run_against_an_openai_endpoint_loads_only_what_it_uses(tmp_path: Path) -> None:
    """The run's HTTP client is aiohttp: httpx (and the click and pygments it pulls in) stays out, as do the Task
    resource's models (agent tasks)."""
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"q{i}", "answer": "a"}) + "\n" for i in range(4)))
    with OpenAIServer(default="a") as server:
        spec = {"apiVersion": "evals.si/v1alpha1", "kind": "RunSpec", "metadata": {"name": "lean"},
                "spec": {"target": {"baseUrl": server.base_url, "model": "m"}, "dataset": {"path": str(data)},
                         "evaluators": [{"ref": "exact-match"}], "output": str(tmp_path / "out.json")}}  # fmt: skip
        (tmp_path / "spec.yaml").write_text(json.dumps(spec))
        loaded = modules_loaded_by("run", "-f", str(tmp_path / "spec.yaml"))
        assert server.request_count() == 4
    assert json.loads((tmp_path / "out.json").read_text())["status"] == "complete"
    assert "aiohttp" in loaded
    assert [name for name in ("httpx", "click", "pygments", "evalsi.specs._task") if name in loaded] == []


GC_PROBE = """
import gc, json, sys
from evalsi.cli.main import main
sys.argv = ["evalsi", *sys.argv[1:]]
seen = []
real_enable = gc.enable
def enable():
    seen.append((gc.isenabled(), "evalsi.cli.run" in sys.modules, gc.get_freeze_count() > 0))
    real_enable()
gc.enable = enable
try:
    main()
except SystemExit:
    pass
print(json.dumps({"seen": seen, "enabled": gc.isenabled()}), file=sys.stderr)
"""


def test_the_collector_is_off_while_a_command_loads_and_back_on_after() -> None:
    done = subprocess.run(
        [sys.executable, "-c", GC_PROBE, "run", "--help"], capture_output=True, text=True, check=False, timeout=300
    )
    state = json.loads(done.stderr.strip().splitlines()[-1])
    # turned on once: when it was off, after the command's module loaded, with start-up's objects frozen
    assert state == {"seen": [[False, True, True]], "enabled": True}


def test_the_collector_is_left_alone_when_the_cli_is_used_as_a_library() -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    resume_collection()  # what loading a command does, here without main() having turned the collector off
    assert gc.isenabled() and gc.get_freeze_count() == frozen


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
