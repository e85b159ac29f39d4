"""Fixtures for the command tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def workdir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test here runs from an unrelated working directory: no path may depend on where evalsi started."""
    directory = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.chdir(directory)
    return directory
