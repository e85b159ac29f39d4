"""A question-and-answer dataset for the CLI run tests: record ``r<i>`` asks ``q<i>`` and expects ``a<i>``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import orjson


def questions(count: int) -> dict[str, str]:
    """``{"q0": "a0", ...}``: the prompts and the answers a right model gives."""
    return {f"q{i}": f"a{i}" for i in range(count)}


def write_questions(path: Path, asked: Mapping[str, str]) -> Path:
    """A JSONL dataset of ``asked`` (``id``, ``prompt``, ``answer`` per line)."""
    path.write_bytes(
        b"".join(
            orjson.dumps({"id": f"r{i}", "prompt": p, "answer": a}) + b"\n" for i, (p, a) in enumerate(asked.items())
        )
    )
    return path
