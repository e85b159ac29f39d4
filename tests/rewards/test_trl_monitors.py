"""Training monitors through the TRL adapter, called as GRPOTrainer._calculate_rewards calls reward functions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from evalsi.monitors import Monitor
from evalsi.rewards.trl import reward_funcs

SPEC: dict[str, Any] = {
    "apiVersion": "evals.si/v1alpha1",
    "kind": "RewardSpec",
    "metadata": {"name": "monitored"},
    "spec": {
        "cache": {"enabled": False},
        "components": [
            {"ref": "exact-match", "name": "exact", "weight": 1.0},
            {"ref": "contains", "name": "says", "weight": 0.5},
        ],
    },
}


class State:
    def __init__(self, step: int) -> None:
        self.global_step = step


VARIED = ["4", "the answer is 4", "5", "it is 4 I think", "6", "7", "six is 6", "the answer is 6"]


def _kwargs(completions: list[str], step: int, logged: list[tuple[str, float]]) -> dict[str, Any]:
    """Two groups of four, with the extras TRL passes."""
    return {
        "prompts": ["What is 2+2?"] * 4 + ["What is 3+3?"] * 4,
        "completions": completions,
        "completion_ids": [list(range(len(c.split()))) for c in completions],
        "answer": ["4"] * 4 + ["6"] * 4,
        "trainer_state": State(step),
        "log_extra": lambda column, values: None,
        "log_metric": lambda name, value: logged.append((name, value)),
    }


def _call(funcs: list[Any], completions: list[str], step: int, logged: list[tuple[str, float]]) -> None:
    kwargs = _kwargs(completions, step, logged)
    for func in funcs:  # TRL calls every function with the same batch
        func(**kwargs)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_monitor_signals_are_logged_once_per_batch(tmp_path: Path, asynchronous: bool) -> None:
    spec = tmp_path / "reward.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    monitor = Monitor(baseline=1, window=1)
    funcs, _ = reward_funcs(spec, asynchronous=asynchronous, monitor=monitor, max_completion_length=4)
    assert monitor.weights == {"exact": 1.0, "says": 0.5}
    logged: list[tuple[str, float]] = []
    if asynchronous:

        async def run() -> None:
            kwargs = _kwargs(VARIED, 1, logged)
            await asyncio.gather(*(cast(Awaitable[Any], f(**kwargs)) for f in funcs))

        asyncio.run(run())
    else:
        _call(funcs, VARIED, 1, logged)
    names = [name for name, _ in logged]
    assert len(monitor.history) == 1  # three functions called, one batch observed
    assert names.count("monitor/zero_variance_groups") == 1
    assert dict(logged)["monitor/zero_variance_groups"] == 0.0
    assert dict(logged)["monitor/truncation_rate"] == pytest.approx(3 / 8)  # 4 words or more: at the limit
    assert "monitor/component_dominance" in names and "monitor/sandbox/timeout" not in names


def test_a_collapsing_run_fires_and_writes_the_stop_file(tmp_path: Path) -> None:
    spec = tmp_path / "reward.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    stop = tmp_path / "stop.json"
    monitor = Monitor(baseline=1, window=1, stop_on=["monitor:duplicate_completions"], stop_file=stop)
    funcs, _ = reward_funcs(spec, monitor=monitor)
    logged: list[tuple[str, float]] = []
    _call(funcs, VARIED, 1, logged)
    assert not stop.exists()
    _call(funcs, ["4"] * 4 + ["6"] * 4, 2, logged)  # every group says one thing: no variance, all duplicates
    last = dict(logged)
    assert last["monitor/zero_variance_groups/fired"] == 1.0
    assert last["monitor/duplicate_completions/fired"] == 1.0
    assert json.loads(stop.read_text())["monitor"] == "duplicate_completions"
    assert monitor.fired["duplicate_completions"] == 2


def test_without_a_monitor_nothing_is_logged(tmp_path: Path) -> None:
    spec = tmp_path / "reward.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    funcs, _ = reward_funcs(spec)
    logged: list[tuple[str, float]] = []
    _call(funcs, VARIED, 1, logged)
    assert [name for name, _ in logged if name.startswith("monitor/")] == []
    assert {name for name, _ in logged} <= {
        "reward/latency_ms",
        "reward/latency_ms_per_rollout",
        "reward/latency_ms/p50",
        "reward/latency_ms/p90",
        "reward/latency_ms/p99",
    }


@pytest.mark.sandbox
def test_sandbox_timeouts_rising_fire_the_verdict_monitor(tmp_path: Path) -> None:
    spec = tmp_path / "reward.yaml"
    code_spec = {
        **SPEC,
        "spec": {
            "cache": {"enabled": False},
            "components": [
                {
                    "ref": "code-exec-tests",
                    "name": "tests",
                    "params": {"timeout": 2},
                    "sandbox": {"minIsolation": "namespaced"},
                }
            ],
        },
    }
    spec.write_text(yaml.safe_dump(code_spec))
    monitor = Monitor(baseline=1, window=1)
    funcs, _ = reward_funcs(spec, monitor=monitor)
    good = "```python\ndef double(x):\n    return 2 * x\n```"
    wrong = "```python\ndef double(x):\n    return x\n```"
    loops = "```python\ndef double(x):\n    while True:\n        pass\n```"
    logged: list[tuple[str, float]] = []

    def call(completions: list[str], step: int) -> None:
        for func in funcs:
            func(
                prompts=["Write double(x)."] * 4,
                completions=completions,
                test_list=[["assert double(2) == 4"]] * 4,
                trainer_state=State(step),
                log_metric=lambda name, value: logged.append((name, value)),
            )

    call([good, wrong, good, wrong], 1)
    first = dict(logged)
    assert first["monitor/sandbox/timeout"] == 0.0 and first["monitor/sandbox_verdicts/fired"] == 0.0
    call([loops, loops, loops, good], 2)
    last = dict(logged)
    assert last["monitor/sandbox/timeout"] == pytest.approx(0.75)
    assert last["monitor/sandbox_verdicts"] == pytest.approx(0.75)
    assert last["monitor/sandbox_verdicts/fired"] == 1.0
    assert monitor.fired["sandbox_verdicts"] == 2
