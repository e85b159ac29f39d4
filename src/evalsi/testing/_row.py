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
    source: str = ""
    """Where the row came from (``capitals.jsonl:3``, ``input_rows[1]``), for reports when it has no id."""
    dataset_id: str | None = None
    """The id the input gave the row (its ``id`` or ``row_id``), if any; ``row_id`` is then this id (``id#2``
    for its repeat)."""
    params_label: str = ""
    """The short name of ``completion_params`` among the test's params (unique among them): ``model`` plus the
    settings in which the params differ, e.g. ``policy,base_url=http://b:8000/v1``."""

    @property
    def label(self) -> str:
        """How reports name the row: its id when the input gave one (``id#2`` for a repeat), else its source."""
        return self.row_id if self.dataset_id is not None or not self.source else self.source

    @property
    def prompt_text(self) -> str:
        """The text of the last user message (the question; else the first message), as one line."""
        asked = [m for m in self.messages if m.get("role") == "user"] or self.messages[:1]
        return " ".join(_text(asked[-1].get("content")).split()) if asked else ""

    @property
    def last_text(self) -> str:
        """The text of the last assistant message (empty when there is none)."""
        for message in reversed(self.messages):
            if message.get("role") == "assistant":
                return _text(message.get("content"))
        return ""

    @property
    def variant(self) -> str:
        """A short name of the completion params, for tables.

        ``params_label`` when the test set it, else ``model`` plus the sampling settings.
        """
        params = self.completion_params
        if self.params_label:
            return self.params_label
        if not params:
            return "pre-generated"
        rest = ",".join(f"{k}={v}" for k, v in sorted(params.items()) if k not in _TRANSPORT)
        model = str(params.get("model", "?"))
        return f"{model}[{rest}]" if rest else model

    def copy_for(self, completion_params: Mapping[str, Any], run: int, params_label: str = "") -> EvaluationRow:
        """A fresh copy of this input for one rollout (messages copied, no score yet)."""
        return EvaluationRow(
            messages=[dict(m) for m in self.messages],
            ground_truth=self.ground_truth,
            row_id=self.row_id,
            completion_params=dict(completion_params),
            run=run,
            metadata=dict(self.metadata),
            source=self.source,
            dataset_id=self.dataset_id,
            params_label=params_label,
        )


def _text(content: Any) -> str:
    """A message's content as text (content parts joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""
