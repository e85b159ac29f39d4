"""``EvaluationRow``: one input and its rollout, as an evaluation test sees and scores it.

Standard library only: this module is also copied into uploaded evaluators' sandboxes, so a scoring function sees
the same row on the server as in pytest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from evalsi.testing._models import EvaluateResult, Message, MessageList, MetricResult, metric_value

__all__ = ["EvaluateResult", "EvaluationRow", "Message", "MetricResult"]

_TRANSPORT = frozenset({"model", "base_url", "api_key_env", "headers", "timeout", "max_retries", "retry_backoff"})
"""Completion params that say how to reach the model, not how it samples: left out of a variant's name."""


class EvaluationRow:
    """A dataset row after its rollout: the conversation, the reference, and the score the test gives it.

    A test reads ``messages`` (the rollout appended the model's reply) and ``ground_truth``, and sets ``score``
    (a number in [0, 1]) and, ideally, ``reason``; ``metrics`` holds further named numbers. The same result reads
    and writes as Eval Protocol spells it: ``row.evaluation_result = EvaluateResult(score=1.0, reason="...")``,
    or ``row.evaluation_result.score = 1.0``; ``row.score`` is ``row.evaluation_result.score``. Messages are
    :class:`Message` dicts whose fields are also attributes (``row.messages[-1].content``).
    """

    def __init__(
        self,
        messages: Iterable[Any] = (),
        ground_truth: Any = None,
        row_id: str = "",
        completion_params: Mapping[str, Any] | None = None,
        run: int = 0,
        metadata: Mapping[str, Any] | None = None,
        score: float | None = None,
        reason: str | None = None,
        metrics: Mapping[str, Any] | None = None,
        rollout_error: str | None = None,
        latency: float = 0.0,
        tokens: int | None = None,
        source: str = "",
        dataset_id: str | None = None,
        params_label: str = "",
        evaluation_result: EvaluateResult | None = None,
    ) -> None:
        """Make a row; a dataset row usually becomes one through the test's input loading.

        Args:
            messages: The conversation so far.
            ground_truth: The reference answer.
            row_id: The row's id in its dataset.
            completion_params: The model and sampling settings of the rollout.
            run: Which of ``num_runs`` repetitions this is.
            metadata: The dataset row's other columns.
            score: The score, when already known.
            reason: Why that score.
            metrics: Further named numbers.
            rollout_error: Why the rollout produced no reply.
            latency: Seconds the rollout took.
            tokens: Tokens the rollout used, when known.
            source: Where the row came from (file and line).
            dataset_id: The dataset's id, when it has one.
            params_label: A short label of ``completion_params``.
            evaluation_result: The result as Eval Protocol spells it; replaces ``score``, ``reason`` and ``metrics``.

        """
        self.messages = messages
        self.ground_truth = ground_truth
        self.row_id = row_id
        self.completion_params: dict[str, Any] = dict(completion_params or {})
        """The model and sampling settings this rollout used (empty for pre-generated rows)."""
        self.run = run
        """Which of ``num_runs`` repetitions this rollout belongs to."""
        self.metadata: dict[str, Any] = dict(metadata or {})
        """The dataset row's other columns."""
        self.evaluation_result = evaluation_result or EvaluateResult(score, reason, dict(metrics or {}))
        self.rollout_error = rollout_error
        """Why the rollout produced no reply (the row scores 0, and the reason says so)."""
        self.latency = latency
        self.tokens = tokens
        self.source = source
        """Where the row came from (``capitals.jsonl:3``, ``input_rows[1]``), for reports when it has no id."""
        self.dataset_id = dataset_id
        """The id the input gave the row (its ``id`` or ``row_id``), if any; ``row_id`` is then this id (``id#2``
        for its repeat)."""
        self.params_label = params_label
        """The short name of ``completion_params`` among the test's params (unique among them): ``model`` plus the
        settings in which the params differ, e.g. ``policy,base_url=http://b:8000/v1``."""

    @property
    def messages(self) -> MessageList:
        """The conversation: :class:`Message` dicts, whatever was put in (a rollout assigns a whole list)."""
        return self._messages

    @messages.setter
    def messages(self, value: Iterable[Any]) -> None:
        self._messages = value if isinstance(value, MessageList) else MessageList(value)

    @property
    def evaluation_result(self) -> EvaluateResult:
        """The row's result (score, reason, metrics); assigning None leaves an empty one to write into."""
        return self._result

    @evaluation_result.setter
    def evaluation_result(self, value: EvaluateResult | None) -> None:
        self._result = EvaluateResult() if value is None else value

    def __repr__(self) -> str:
        return (
            f"EvaluationRow(row_id={self.row_id!r}, messages={len(self.messages)}, score={self.score!r}, "
            f"reason={self.reason!r})"
        )

    @property
    def score(self) -> float | None:
        """The row's score in [0, 1] (``evaluation_result.score``); None until the test sets it."""
        return self.evaluation_result.score

    @score.setter
    def score(self, value: float | None) -> None:
        self.evaluation_result.score = value

    @property
    def reason(self) -> str | None:
        """Why the row got its score (``evaluation_result.reason``)."""
        return self.evaluation_result.reason

    @reason.setter
    def reason(self, value: str | None) -> None:
        self.evaluation_result.reason = value

    @property
    def metrics(self) -> dict[str, Any]:
        """Further named numbers (``evaluation_result.metrics``: numbers or :class:`MetricResult`)."""
        return self.evaluation_result.metrics

    @metrics.setter
    def metrics(self, value: Mapping[str, Any]) -> None:
        self.evaluation_result.metrics = dict(value)

    def metric_values(self) -> dict[str, float]:
        """The metrics as numbers (a :class:`MetricResult` gives its score; invalid ones are left out)."""
        values = {str(name): metric_value(value) for name, value in self.metrics.items()}
        return {name: value for name, value in values.items() if value is not None}

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
        last = self.last_assistant_message()
        return "" if last is None else _text(last.get("content"))

    def last_assistant_message(self) -> Message | None:
        """The last assistant message, or None."""
        for message in reversed(self.messages):
            if message.get("role") == "assistant":
                return message
        return None

    def get_assistant_messages(self) -> list[Message]:
        """The assistant's messages, in order."""
        return [m for m in self.messages if m.get("role") == "assistant"]

    def get_user_messages(self) -> list[Message]:
        """The user's messages, in order."""
        return [m for m in self.messages if m.get("role") == "user"]

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
        """A fresh copy of this input for one rollout (messages copied, no score yet).

        Args:
            completion_params: The rollout's model and sampling settings.
            run: Which repetition it is.
            params_label: A short label of ``completion_params``.

        """
        return EvaluationRow(
            messages=[Message(m) for m in self.messages],
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
