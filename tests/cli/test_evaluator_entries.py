"""``evalsi evaluators upload`` without ``--entry``: the project's evaluation tests are found by reading its test
files (never importing them); several are listed and refused in a script. The upload itself, with the entry
found, runs against a real server in tests/server/test_evaluator_builds.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsi.cli._entries import find_entries
from evalsi.cli.evaluators import default_id
from evalsi.cli.main import app

DECORATED = textwrap.dedent("""
    import evalsi.testing
    from evalsi.testing import EvaluationRow, evaluation_test

    import module_not_installed_here  # never imported: the file is only read

    @evaluation_test(input_rows=[{"messages": [{"role": "user", "content": "q"}]}])
    def test_first(row: EvaluationRow) -> EvaluationRow:
        return row

    def helper(row):
        return row

    @evalsi.testing.evaluation_test(mode="all")
    async def test_second(rows):
        return rows

    test_from_spec = evaluation_test.from_spec("reward.yaml")  # a spec scores on the server by itself
""")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "checks").mkdir(parents=True)
    (root / "build").mkdir()
    (root / "test_capitals.py").write_text(DECORATED)
    (root / "checks" / "words_test.py").write_text(
        "from evalsi.testing import evaluation_test\n\n@evaluation_test()\ndef test_words(row):\n    return row\n"
    )
    (root / "helpers.py").write_text(DECORATED)  # not a test file
    (root / "build" / "test_old.py").write_text(DECORATED)  # ignored by .gitignore, so not uploaded either
    (root / ".gitignore").write_text("build/\n")
    (root / "test_broken.py").write_text("def test_(:\n")
    return root


def test_the_evaluation_tests_of_the_test_files_that_would_be_uploaded(project: Path) -> None:
    assert find_entries(project) == [
        "checks/words_test.py::test_words",
        "test_capitals.py::test_first",
        "test_capitals.py::test_second",
    ]


def test_several_in_a_script_fail_listing_them_and_upload_nothing(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALSI_SERVER", "http://127.0.0.1:9")  # nothing listens: any upload would fail otherwise
    runner = CliRunner()
    for extra in ([], ["--yes"]):
        result = runner.invoke(app, ["evaluators", "upload", str(project), "--id", "x", *extra])
        assert result.exit_code == 2, result.output
        assert "3 evaluation tests in" in result.output and "choose one with --entry" in result.output
        assert "1. checks/words_test.py::test_words" in result.output
        assert "3. test_capitals.py::test_second" in result.output


def test_the_project_directory_may_be_given_with_path(project: Path, tmp_path: Path) -> None:
    runner = CliRunner(env={"EVALSI_SERVER": "http://127.0.0.1:9"})
    result = runner.invoke(app, ["evaluators", "upload", "--path", str(project), "--id", "x", "--yes"])
    assert result.exit_code == 2, result.output
    assert "3 evaluation tests in" in result.output and "1. checks/words_test.py::test_words" in result.output
    both = runner.invoke(app, ["evaluators", "upload", str(tmp_path), "--path", str(project), "--yes"])
    assert both.exit_code == 2 and "name different directories" in both.output


def test_a_project_without_evaluation_tests_is_refused(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    pass\n")
    result = CliRunner().invoke(app, ["evaluators", "upload", str(tmp_path)])
    assert result.exit_code == 2 and "no @evaluation_test in the test files" in result.output


@pytest.mark.parametrize(
    ("function", "evaluator_id"),
    [("test_capital_cities", "capital-cities"), ("test_Math__Equiv", "math-equiv"), ("score", "score")],
)
def test_the_evaluator_id_defaults_to_the_tests_name(function: str, evaluator_id: str) -> None:
    assert default_id(function) == evaluator_id


def run_on_a_terminal(argv: list[str], answer: bytes | None, cwd: Path) -> tuple[int, str]:
    """Run ``evalsi`` with a pseudo-terminal as stdin, stdout and stderr; type ``answer`` at its question."""
    import os
    import select
    import subprocess
    import sys
    import time

    primary, secondary = os.openpty()
    env = {**os.environ, "EVALSI_SERVER": "http://127.0.0.1:9", "COLUMNS": "200"}
    process = subprocess.Popen(
        [sys.executable, "-m", "evalsi", *argv], stdin=secondary, stdout=secondary, stderr=secondary, env=env, cwd=cwd
    )
    os.close(secondary)
    seen = b""
    deadline = time.monotonic() + 120
    try:
        while process.poll() is None and time.monotonic() < deadline:
            if answer is not None and b"[Y/n]" in seen:
                os.write(primary, answer)
                answer = None
            if select.select([primary], [], [], 0.5)[0]:
                try:
                    seen += os.read(primary, 4096)
                except OSError:
                    break
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(primary)
    return code, seen.decode(errors="replace")


def test_on_a_terminal_the_only_test_is_confirmed_unless_yes(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text(
        "from evalsi.testing import evaluation_test\n\n@evaluation_test()\ndef test_one(row):\n    return row\n"
    )
    code, output = run_on_a_terminal(["evaluators", "upload", str(tmp_path)], b"n\n", tmp_path)
    assert code == 2 and "Use the evaluation test test_one.py::test_one?" in output
    assert "no evaluation test chosen" in output
    code, output = run_on_a_terminal(["evaluators", "upload", str(tmp_path), "--yes"], None, tmp_path)
    assert "[Y/n]" not in output and "evaluation test: test_one.py::test_one" in output
    assert "evaluator id: one" in output  # then the upload goes to the server (none listens here)
