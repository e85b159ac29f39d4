"""``EvaluationRow``: one input and its rollout, as an evaluation test sees and scores it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_TRANSPORT = frozenset({"model", "base_url", "api_key_env", "headers", "timeout", "max_retries", "retry_backoff"})
"""Completion params that say how to reach the model, not how it samples: left out of a variant's name."""

Message = dict[str, Any]
"""A chat message: ``{"role": ..., "content": ...}`` (tool calls and other fields pass through)."""


@dataclass
class EvaluationRow:
    """A dataset row after its rollout: the conversation, the reference, and the score the test gives it.

    A test reads ``messages`` (the rollout appended the model's reply) and ``ground_truth``, and sets ``score``
    (a number in [0, 1]) and, ideally, ``reason``; ``metrics`` holds further named numbers.
    """

    messages: list[Message]
    ground_truth: Any = None
    row_id: str = ""
    completion_params: dict[str, Any] = field(default_factory=dict)
    """The model and sampling settings this rollout used (empty for pre-generated rows)."""
    run: int = 0
    """Which of ``num_runs`` repetitions this rollout belongs to."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The dataset row's other columns."""
    score: float | None = None
    reason: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    rollout_error: str | None = None
    """Why the rollout produced no reply (the row scores 0, and the reason says so)."""
    latency: float = 0.0
    tokens: int | None = None

    @property
    def last_text(self) -> str:
        """The text of the last assistant message (empty when there is none)."""
        for message in reversed(self.messages):
            if message.get("role") == "assistant":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                if isinstance(content, list):  # content parts
                    return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
                return ""
        return ""

    @property
    def variant(self) -> str:
        """A short name of the completion params (``model`` plus the other settings), for tables."""
        params = self.completion_params
        if not params:
            return "pre-generated"
        rest = ",".join(f"{k}={v}" for k, v in sorted(params.items()) if k not in _TRANSPORT)
        model = str(params.get("model", "?"))
        return f"{model}[{rest}]" if rest else model

    def copy_for(self, completion_params: Mapping[str, Any], run: int) -> EvaluationRow:
        """A fresh copy of this input for one rollout (messages copied, no score yet)."""
        return EvaluationRow(
            messages=[dict(m) for m in self.messages],
            ground_truth=self.ground_truth,
            row_id=self.row_id,
            completion_params=dict(completion_params),
            run=run,
            metadata=dict(self.metadata),
        )
