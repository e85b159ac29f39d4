"""The manual's probe table covers every built-in evaluator, and the script that writes it still runs."""

from __future__ import annotations

import importlib.util
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "probe-table.md"


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("probe_table", ROOT / "scripts" / "probe_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_names_every_built_in_evaluator_and_example_spec() -> None:
    page = PAGE.read_text()
    # evalsi's own entry points, not the registry: other tests in this process register evaluators of their own
    built_in = [point.name for point in distribution("evalsi").entry_points if point.group == "evalsi.evaluators"]
    assert "math-equiv" in built_in
    missing = [name for name in built_in if f"`{name}`" not in page]
    assert not missing, f"docs/reference/probe-table.md lacks {missing}: run scripts/probe_table.py --output {PAGE}"
    assert "not covered by this table" not in page
    for spec in ("math-reward.yaml", "code-reward.yaml"):
        assert f"`examples/finetuning/{spec}`" in page


@pytest.mark.timeout(900)
def test_the_script_probes_each_evaluator_and_finds_what_the_page_says(tmp_path: Path) -> None:
    out = tmp_path / "probe-table.md"
    text = _script().main(["--quick", "--output", str(out)])
    assert out.read_text().startswith("# Probe table") and text in out.read_text()
    rows = {line.split(" | ")[0].strip("| `"): line for line in text.splitlines() if line.startswith("| `")}
    # contains is earned by the reference buried in junk; exact-match and the sandboxed tests are not
    assert "**reference-padded**" in rows["contains"]
    assert "| none | full reward |" in rows["exact-match"]
    assert "| none | full reward |" in rows["code-exec-tests"]
