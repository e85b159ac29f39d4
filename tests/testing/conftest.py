"""Evaluation tests are run as pytest runs them: generated test files, run in-process by ``pytester``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.openai_server import OpenAIServer

pytest_plugins = ["pytester"]

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Peru": "Lima", "Chad": "N'Djamena"}


def capital_answer(prompt: str, body: dict[str, Any]) -> str:
    """The right capital, except that model ``weak`` gets Chad (and everything else) wrong."""
    for country, capital in CAPITALS.items():
        if country in prompt:
            if body.get("model") == "weak" or country == "Chad":
                return "I am not sure."
            return f"The capital of {country} is {capital}."
    return "?"


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(default=capital_answer) as srv:
        yield srv


@pytest.fixture
def capitals(tmp_path: Path) -> Path:
    import json

    path = tmp_path / "capitals.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(
                {
                    "id": country.lower(),
                    "messages": [{"role": "user", "content": f"Capital of {country}?"}],
                    "ground_truth": capital,
                }
            )
            for country, capital in CAPITALS.items()
        )
        + "\n"
    )
    return path


@pytest.fixture(autouse=True)
def _results_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSI_RESULTS_DB", str(tmp_path / "results.sqlite"))
    for name in ("EVALSI_PASSED_THRESHOLD", "EVALSI_NUM_RUNS", "EVALSI_MAX_ROWS", "EVALSI_COMPLETION_PARAMS"):
        monkeypatch.delenv(name, raising=False)
