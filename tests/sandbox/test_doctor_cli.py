"""``evalsi sandbox doctor`` prints each rung, whether it works here, and how to fix the ones that do not."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from evalsi.cli.sandbox import app
from tests.sandbox._helpers import without_runsc  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(60)]


def test_doctor_prints_every_rung_and_the_best_one():
    result = CliRunner().invoke(app, ["doctor"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for rung in ("process", "namespaced", "gvisor"):
        assert rung in result.output
    assert "best available rung: namespaced" in result.output or "best available rung: gvisor" in result.output


@pytest.mark.usefixtures("without_runsc")
def test_doctor_names_what_is_missing():
    result = CliRunner().invoke(app, ["doctor"], terminal_width=200)
    assert result.exit_code == 0
    assert "runsc" in result.output and "apt-get" in result.output
    assert "best available rung: namespaced" in result.output


@pytest.mark.usefixtures("without_runsc")
def test_doctor_require_exits_1_when_the_floor_is_not_met():
    assert CliRunner().invoke(app, ["doctor", "--require", "namespaced"]).exit_code == 0
    missing = CliRunner().invoke(app, ["doctor", "--require", "gvisor"], terminal_width=200)
    assert missing.exit_code == 1
    assert missing.stderr.startswith("error: --require gvisor") and "error" not in missing.stdout
    wrong = CliRunner().invoke(app, ["doctor", "--require", "chroot"], terminal_width=200)
    assert wrong.exit_code == 2
    assert wrong.stderr.startswith("error: --require must be one of process, namespaced, gvisor, got 'chroot'")
