"""The two counts of a RunSpec, numSamples (records) and samples (completions per record), are explained where a
user meets them: ``evalsi run --help`` and the error for a field that looks like either."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from evalsi.errors import SpecError
from evalsi.runs import load_run

SPEC = """\
apiVersion: evals.si/v1alpha1
kind: RunSpec
metadata: {name: qa}
spec:
  target: {baseUrl: http://127.0.0.1:9/v1, model: base}
  dataset: {path: qa.jsonl}
  evaluators: [{ref: exact-match}]
"""

EXPLAINED = (
    "spec.numSamples: how many dataset records are evaluated, the first N or -1 for all; "
    "spec.samples: how many completions are generated per record"
)


def write(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(SPEC + extra)
    return path


@pytest.mark.parametrize("override", ["n=8", "sampling.n=8", "sampling.num_samples=8", "limit=50", "epochs=3"])
def test_an_override_that_looks_like_a_count_says_which_field_means_what(tmp_path: Path, override: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_run(write(tmp_path), overrides=[override])
    message = str(caught.value)
    assert message.startswith(f"--set: {override.split('=')[0]} ") and "unknown field" in message
    assert EXPLAINED in message


@pytest.mark.parametrize(("extra", "line"), [("  n: 8\n", 8), ("  sampling: {num_samples: 8}\n", 8)])
def test_a_spec_field_that_looks_like_a_count_says_which_field_means_what(
    tmp_path: Path, extra: str, line: int
) -> None:
    with pytest.raises(SpecError) as caught:
        load_run(write(tmp_path, extra))
    assert f"run.yaml:{line}:" in str(caught.value) and EXPLAINED in str(caught.value)


def test_other_unknown_fields_get_no_such_note(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_run(write(tmp_path, "  temprature: 0.5\n"))
    assert "unknown field" in str(caught.value) and "numSamples" not in str(caught.value)


def test_both_spellings_of_the_record_count_still_work(tmp_path: Path) -> None:
    assert load_run(write(tmp_path, "  numSamples: 3\n  samples: 4\n")).body.num_samples == 3
    assert load_run(write(tmp_path, "  num_samples: 3\n")).body.num_samples == 3


def test_run_help_explains_both_counts() -> None:
    text = " ".join(CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "300"}).stdout.split())
    assert "numSamples: how many dataset records are evaluated (the first N; -1, the default, all of them)" in text
    assert "samples: how many completions are generated for each record (OpenAI's n; pass@k needs samples >= k)" in text
