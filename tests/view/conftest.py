from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from starlette.testclient import TestClient

from evalsi.view import create_app
from tests.view.make import HOSTILE, record, simple_run, write_run


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    """Two comparable runs, a run with a hostile completion, a learning curve and a reward score file."""
    root = tmp_path / "results"
    root.mkdir()
    simple_run(root / "a.results.json", "run-a", [True] * 6 + [False] * 6)
    simple_run(root / "b.results.json", "run-b", [True] * 10 + [False] * 2)
    write_run(root / "hostile.results.json", "hostile",
              [record(0, [True], completion=HOSTILE), record(1, [None], completion="plain")])
    curve = root / "logs" / "grpo-1"
    curve.mkdir(parents=True)
    for step, correct in (("base", 30), ("step-100", 31), ("step-200", 12)):
        simple_run(curve / f"{step}.json", f"grpo-1 {step}", [True] * correct + [False] * (40 - correct))
    rows = [{"index": i, "id": f"q{i}", "total": i / 10, "status": "ok" if i < 8 else "gated",
             "components": {"correct": {"value": i % 2 == 0, "status": "ok", "reason": f"reason {i}"},
                            "length": {"value": None, "status": "skipped" if i == 3 else "error", "reason": None}
                            if i in (3, 4) else {"value": 0.5, "status": "ok", "reason": None}}}
            for i in range(10)]
    (root / "scores.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return root


@pytest.fixture
def client(results_dir: Path) -> TestClient:
    return TestClient(create_app([results_dir]))


def ids(html: str, kind: str) -> dict[str, str]:
    """Source ids by the text of their links on the list page."""
    return {m.group(2): m.group(1) for m in re.finditer(rf'href="/{kind}/([0-9a-f]{{12}})">([^<]+)</a>', html)}
