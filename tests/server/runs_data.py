"""Real results documents for the Run Service tests: two runs of the engine over the same 40 records.

The target echoes the prompt (``os.path:basename``); run B's references differ on the first ``wrong`` records,
so B scores lower there, record by record, as a regressed checkpoint would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalsi.runs import Runner, run_from_mapping
from evalsi.runs._results import read_results

RECORDS = 40


def results_document(folder: Path, name: str, wrong: int = 0) -> dict[str, Any]:
    """Run a RunSpec with the engine and return its results document (exact-match, and whether it contains a 1)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / f"{name}.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "prompt": f"q{i}", "answer": "no" if i < wrong else f"q{i}"}) + "\n"
            for i in range(RECORDS)
        )
    )
    run = run_from_mapping(
        {
            "apiVersion": "evals.si/v1alpha1",
            "kind": "RunSpec",
            "metadata": {"name": name},
            "spec": {
                "target": {"callable": "os.path:basename"},
                "dataset": {"path": str(data)},
                "evaluators": [{"ref": "exact-match"}, {"ref": "contains", "name": "has-1", "params": {"text": "1"}}],
                "output": str(folder / f"{name}.results.json"),
            },
        }
    )
    outcome = Runner(run).run()
    return read_results(outcome.path)
