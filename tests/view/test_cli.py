from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app


@pytest.fixture
def served(results_dir: Path) -> Iterator[str]:
    """``evalsi view DIR --port 0`` as a real process; yields its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "evalsi", "view", str(results_dir), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), process.stderr.read() if process.stderr else url
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_view_serves_on_loopback_and_rejects_other_hosts(served: str) -> None:
    page = httpx.get(served, timeout=10)  # the socket listens before the URL is printed
    assert page.status_code == 200 and "run-a" in page.text
    assert httpx.get(served, headers={"Host": "attacker.example"}).status_code == 400
    assert httpx.post(served).status_code == 405


def test_view_refuses_a_missing_path(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["view", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no such file or directory" in result.output
