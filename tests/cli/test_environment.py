"""Only documented environment variables change what ``evalsi`` does; options never come from the environment."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from evalsi.cli.main import ENVIRONMENT, app

ROOT = Path(__file__).resolve().parents[2]


def test_an_option_named_like_a_variable_is_not_read_from_the_environment() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["evaluators", "list"], env={"EVALSI_VERSION": "1", "EVALSI_HELP": "1"})
    assert result.exit_code == 0
    assert "evalsi " not in result.stdout.splitlines()[0] and "exact-match" in result.stdout
    quiet = runner.invoke(app, ["sandbox", "doctor"], env={"EVALSI_SANDBOX_DOCTOR_REQUIRE": "nonsense"})
    assert "error:" not in quiet.stderr  # --require was not set from the environment


def test_help_and_manual_list_every_variable_the_source_reads() -> None:
    read = set()
    for path in (ROOT / "src" / "evalsi").rglob("*.py"):
        read |= set(re.findall(r"environ\.get\(\"([A-Z_]+)\"", path.read_text(encoding="utf-8")))
    assert {"EVALSI_REWARD_SPEC", "EVALSI_SERVER", "EVALSI_TOKEN", "HF_HOME"} <= read
    help_text = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).stdout
    manual = (ROOT / "docs" / "reference" / "environment.md").read_text(encoding="utf-8")
    for name in read:
        assert name in ENVIRONMENT and name in help_text and name in manual, name
