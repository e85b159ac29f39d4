"""`evalsi run --ray` and `evalsi checkpoints eval --ray`: without Ray installed they say how to install it, before
generating anything."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from evalsi.cli.main import app
from tests.cli.test_run_messages import spec_args
from tests.helpers.openai_server import OpenAIServer
from tests.training.conftest import write_spec


@pytest.fixture
def without_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def import_module(name: str, package: str | None = None) -> ModuleType:
        if name == "ray" or name.startswith("ray."):
            raise ImportError(f"No module named {name!r}")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", import_module)


@pytest.mark.usefixtures("without_ray")
def test_run_says_how_to_install_ray(tmp_path: Path) -> None:
    with OpenAIServer(default="4") as server:
        result = CliRunner().invoke(app, [*spec_args(tmp_path, server), "--ray", "auto", "--ray-workers", "2"])
        assert result.exit_code == 2
        assert "pip install 'evalsi[ray]'" in result.stderr
        assert server.request_count() == 0
    assert not (tmp_path / "out.json").exists()


@pytest.mark.usefixtures("without_ray")
def test_checkpoints_eval_says_how_to_install_ray(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "specs")
    with OpenAIServer(default="4") as server:
        options = ["-f", str(spec), "--training-run", "r", "--serve", "endpoint", "--base-url", server.base_url]
        options += ["--log-dir", str(tmp_path / "logs"), "--ray", "auto"]
        result = CliRunner().invoke(app, ["checkpoints", "eval", "org/base", "--step", "base", *options])
        assert result.exit_code == 2
        assert "pip install 'evalsi[ray]'" in result.stderr
        assert server.request_count() == 0


@pytest.mark.usefixtures("without_ray")
def test_run_with_shards_says_how_to_install_ray(tmp_path: Path) -> None:
    with OpenAIServer(default="4") as server:
        result = CliRunner().invoke(app, [*spec_args(tmp_path, server), "--ray", "auto", "--ray-shards", "4"])
        assert result.exit_code == 2
        assert "pip install 'evalsi[ray]'" in result.stderr
        assert server.request_count() == 0
    assert not (tmp_path / "out.json").exists()


def test_shards_need_a_cluster(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "specs")
    with OpenAIServer(default="4") as server:
        run = CliRunner().invoke(app, [*spec_args(tmp_path, server), "--ray-shards", "4"])
        options = ["-f", str(spec), "--training-run", "r", "--serve", "endpoint", "--base-url", server.base_url]
        options += ["--log-dir", str(tmp_path / "logs"), "--ray-shards", "2"]
        step = CliRunner().invoke(app, ["checkpoints", "eval", "org/base", "--step", "base", *options])
        assert server.request_count() == 0
    for result in (run, step):
        assert result.exit_code == 2
        assert "--ray-shards needs --ray ADDRESS" in result.stderr
