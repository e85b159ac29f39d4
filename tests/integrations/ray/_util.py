"""Helpers of the Ray tests: specs over the probe evaluator, rollouts, and waiting on conditions."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalsi.rewards import RewardResult

PROBE_MODULE = "tests.integrations.ray.probe"
"""The test evaluator module every actor imports."""
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "finetuning"


def probe_spec(log: Path, name: str = "probe", **params: Any) -> dict[str, Any]:
    """A RewardSpec whose one component is the probe evaluator, logging to ``log``."""
    return {
        "apiVersion": "evals.si/v1alpha1",
        "kind": "RewardSpec",
        "metadata": {"name": name},
        "spec": {"components": [{"ref": "ray-probe", "name": "probe", "params": {"log": str(log), **params}}]},
    }


def dicts(results: list[RewardResult]) -> list[dict[str, Any]]:
    """Results as plain data, for equality."""
    return [r.to_dict() for r in results]


def wait_for(condition: Callable[[], Any], bound: float = 120.0, what: str = "a condition") -> Any:
    """Poll ``condition`` until it is truthy (returning it), failing after ``bound`` seconds."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {bound:g} s waiting for {what}")
