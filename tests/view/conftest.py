from __future__ import annotations

import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from evalsi.view import create_app
from tests.view.make import build_results


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    return build_results(tmp_path / "results")


@pytest.fixture
def client(results_dir: Path) -> TestClient:
    return TestClient(create_app([results_dir]))


def ids(html: str, kind: str) -> dict[str, str]:
    """Source ids by the text of their links on the list page."""
    return {m.group(2): m.group(1) for m in re.finditer(rf'href="/{kind}/([0-9a-f]{{12}})">([^<]+)</a>', html)}
