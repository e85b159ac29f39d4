"""Helpers: run a command in an episode and read its observation."""

from __future__ import annotations

import json
from typing import Any

from evalsi_harness import TaskEnv


def bash(env: TaskEnv, command: str) -> dict[str, Any]:
    """The observation of a bash step, decoded; the episode must still be running."""
    observation, _, terminated, truncated, _ = env.step({"tool": "bash", "command": command})
    assert not (terminated or truncated), observation
    decoded: dict[str, Any] = json.loads(observation)
    return decoded
