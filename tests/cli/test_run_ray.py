"""`evalsi run --ray`: without Ray installed it says how to install it, before generating anything."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from tests.cli.test_run_messages import spec_args
from tests.helpers.openai_server import OpenAIServer


def test_without_ray_installed_it_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def without_ray(name: str, package: str | None = None) -> ModuleType:
        if name == "ray" or name.startswith("ray."):
            raise ImportError(f"No module named {name!r}")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", without_ray)
    with OpenAIServer(default="4") as server:
        result = CliRunner().invoke(app, [*spec_args(tmp_path, server), "--ray", "auto", "--ray-workers", "2"])
        assert result.exit_code == 2
        assert "pip install 'evalsi[ray]'" in result.stderr
        assert server.request_count() == 0
    assert not (tmp_path / "out.json").exists()
