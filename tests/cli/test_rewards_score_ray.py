"""`evalsi rewards score --ray`: what it needs, said before anything runs."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app

SPEC = Path(__file__).resolve().parents[2] / "examples" / "finetuning" / "math-reward.yaml"
DATA = SPEC.with_name("math-rollouts.jsonl")


def test_ray_needs_an_output_file() -> None:
    result = CliRunner().invoke(app, ["rewards", "score", "-s", str(SPEC), "-d", str(DATA), "--ray", "auto"])
    assert result.exit_code == 2
    assert "--ray needs --output" in result.stderr


def test_without_ray_installed_it_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def without_ray(name: str, package: str | None = None) -> ModuleType:
        if name == "ray" or name.startswith("ray."):
            raise ImportError(f"No module named {name!r}")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", without_ray)
    out = tmp_path / "scores.jsonl"
    result = CliRunner().invoke(
        app, ["rewards", "score", "-s", str(SPEC), "-d", str(DATA), "-o", str(out), "--ray", "auto"]
    )
    assert result.exit_code == 2
    assert "pip install 'evalsi[ray]'" in result.stderr
    assert not out.exists() and not (tmp_path / "scores.jsonl.parts").exists()
