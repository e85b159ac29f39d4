"""Skipped components through the trainer adapters: counted per rollout in the logs, warned about once."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import evalsi.rewards.openrlhf
import evalsi.rewards.verl
from evalsi.rewards import from_mapping
from evalsi.rewards._scorer import clear_shared
from evalsi.rewards._skips import MIN_BATCH, MIN_STREAK, reset_skip_watch
from evalsi.rewards.serve import create_app
from tests.rewards._servers import ServerThread

SPEC: dict[str, Any] = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "skips"},
    "spec": {
        "components": [
            {"ref": "contains", "name": "has-hi", "weight": 0.2, "params": {"text": "hi"}},
            {"ref": "exact-match", "name": "correct", "weight": 0.8},  # skipped without a reference
        ]
    },
}


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    clear_shared()
    reset_skip_watch()
    yield
    clear_shared()
    reset_skip_watch()


@pytest.fixture
def spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    monkeypatch.setenv("EVALSI_REWARD_SPEC", str(path))
    return path


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "evalsi.rewards" and r.levelno == logging.WARNING]


def test_verl_batch_counts_skips_and_warns_once(spec_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    size = MIN_BATCH
    out = evalsi.rewards.verl.compute_score_batch(["d"] * size, ["hi"] * size, [None] * size, None)
    assert [o["correct_skipped"] for o in out] == [1.0] * size and [o["has-hi_skipped"] for o in out] == [0.0] * size
    (warning,) = warnings_of(caplog)
    assert "verl: component 'correct' was skipped for all 16 rollouts of a batch" in warning
    assert "reference" in warning
    evalsi.rewards.verl.compute_score_batch(["d"] * size, ["hi"] * size, [None] * size, None)
    assert len(warnings_of(caplog)) == 1  # once per process


def test_a_partly_skipped_or_small_batch_does_not_warn(spec_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    size = MIN_BATCH
    truths: list[Any] = [None] * (size - 1) + ["hi"]
    out = evalsi.rewards.verl.compute_score_batch(["d"] * size, ["hi"] * size, truths, None)
    assert sum(o["correct_skipped"] for o in out) == size - 1
    evalsi.rewards.verl.compute_score_batch(["d"] * 3, ["hi"] * 3, [None] * 3, None)
    assert warnings_of(caplog) == []


def test_openrlhf_one_sample_calls_warn_after_a_long_run(spec_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    func = evalsi.rewards.openrlhf.reward_func
    for _ in range(MIN_STREAK - 2):
        assert func(["p hi"], ["p "], None)["extra_logs"]["correct_skipped"] == [1.0]
    assert func(["p hi"], ["p "], ["hi"])["extra_logs"]["correct_skipped"] == [0.0]  # a labelled one resets
    for _ in range(MIN_STREAK - 1):
        func(["p hi"], ["p "], None)
    assert warnings_of(caplog) == []
    func(["p hi"], ["p "], None)
    (warning,) = warnings_of(caplog)
    assert f"OpenRLHF: component 'correct' was skipped for {MIN_STREAK} rollouts in a row" in warning


def test_rewards_serve_counts_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    size = MIN_BATCH
    with ServerThread(create_app(from_mapping(SPEC))) as server:
        body = {"query": ["p hi"] * size, "prompts": ["p "] * size}
        answer = httpx.post(server.url + "/", json=body, timeout=30).json()
    assert answer["extra_logs"]["correct_skipped"] == [1.0] * size
    assert answer["extra_logs"]["has-hi_skipped"] == [0.0] * size
    (warning,) = warnings_of(caplog)
    assert "component 'correct' was skipped for all 16 rollouts of a batch" in warning
