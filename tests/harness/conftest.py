"""Agent-task tests run real episodes in real sandboxes (bubblewrap must be installed, as for the sandbox tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsi_harness import CommandChecker, Setup, Task

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "agent-tasks"


def example(name: str) -> Path:
    """The task file of an example task."""
    return EXAMPLES / name / "task.yaml"


def small_task(**overrides: object) -> Task:
    """A task with one setup file and a checker that passes when done.txt says yes."""
    fields: dict[str, object] = {
        "name": "small",
        "description": "Write yes into done.txt.",
        "checker": CommandChecker('[ "$(cat done.txt 2>/dev/null)" = yes ] && exit 0 || exit 1'),
        "setup": Setup(files={"notes/readme.txt": "the starting state\n"}),
        "max_steps": 8,
    }
    fields.update(overrides)
    return Task(**fields)  # type: ignore[arg-type]


@pytest.fixture
def task() -> Task:
    return small_task()
