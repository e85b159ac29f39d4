"""Chat messages and evaluation results in the shapes Eval Protocol tests use, as plain Python.

A scoring function written for Eval Protocol reads ``row.messages[-1].content`` and writes
``row.evaluation_result = EvaluateResult(score=..., reason=...)`` (or ``row.evaluation_result.score = ...``); one
written for evalsi reads ``row.messages[-1]["content"]`` and writes ``row.score``. Both work on the same row:

- :class:`Message` is a ``dict`` (``{"role": ..., "content": ...}``, serialised as it is) whose fields also read
  and write as attributes (``message.content``; a missing ``content`` reads ``""``, other missing fields ``None``).
- :class:`EvaluateResult` holds ``score``, ``reason``, ``metrics`` (names to :class:`MetricResult` or numbers),
  ``is_score_valid`` and ``error``; a row's ``score``, ``reason`` and ``metrics`` are its evaluation result's.

Standard library only: the module is also copied into uploaded evaluators' sandboxes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, SupportsIndex

MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content", "function_call")
"""Fields every message reads as an attribute, present or not."""


class Message(dict[str, Any]):
    """A chat message: a ``dict`` whose fields are also attributes (``message.role``, ``message.content``).

    Example:
        >>> m = Message(role="assistant", content="Paris.")
        >>> m.content, m["role"], m.tool_calls
        ('Paris.', 'assistant', None)
        >>> m.content = "Lima."; m
        {'role': 'assistant', 'content': 'Lima.'}

    """

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self:
            return self[name]
        if name in MESSAGE_FIELDS:
            return "" if name == "content" else None
        raise AttributeError(f"the message has no field {name!r} (it has {', '.join(map(str, self)) or 'none'})")

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None

    def copy(self) -> Message:
        """A shallow copy, still a :class:`Message`."""
        return Message(self)

    def model_dump(self, *, exclude_none: bool = False) -> dict[str, Any]:
        """The message as a plain ``dict`` (without ``None`` fields when ``exclude_none``).

        Args:
            exclude_none: Leave out fields that are None.

        """
        return {k: v for k, v in self.items() if not (exclude_none and v is None)}


def as_message(value: Any) -> Message:
    """A :class:`Message` from a mapping or an object with ``role``/``content`` attributes (a model's message).

    Raises:
        TypeError: ``value`` is neither.

    """
    if isinstance(value, Message):
        return value
    if isinstance(value, Mapping):
        return Message(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return Message(dump(exclude_none=True))
    if hasattr(value, "role"):
        return Message({k: getattr(value, k) for k in MESSAGE_FIELDS if getattr(value, k, None) is not None})
    raise TypeError(f"a chat message is a mapping with `role` and `content`, not {type(value).__name__}")


class MessageList(list[Message]):
    """A row's messages: whatever is put in (a dict, a message object) is kept as a :class:`Message`."""

    def __init__(self, messages: Iterable[Any] = ()) -> None:
        super().__init__(as_message(m) for m in messages)

    def append(self, message: Any) -> None:
        """Append one message."""
        super().append(as_message(message))

    def insert(self, index: SupportsIndex, message: Any) -> None:
        """Insert one message."""
        super().insert(index, as_message(message))

    def extend(self, messages: Iterable[Any]) -> None:
        """Append several messages."""
        super().extend(as_message(m) for m in messages)

    def __iadd__(self, messages: Iterable[Any]) -> MessageList:  # type: ignore[override,misc]
        self.extend(messages)
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, slice):
            super().__setitem__(index, [as_message(m) for m in value])
        else:
            super().__setitem__(index, as_message(value))


@dataclass
class MetricResult:
    """One named metric of a scored row: a score in [0, 1], why, and whether the score is valid."""

    score: float
    reason: str = ""
    is_score_valid: bool = True
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvaluateResult:
    """What a scoring function concluded about a row: its score, why, and named metrics.

    ``is_score_valid=False`` says the function could not score the row: it counts as 0, with the reason.
    """

    score: float | None = None
    reason: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    """Metric name -> :class:`MetricResult` or a number."""
    is_score_valid: bool = True
    error: str | None = None


def metric_value(value: Any) -> float | None:
    """A metric's number: a :class:`MetricResult`'s score (None when invalid) or the number itself."""
    if isinstance(value, MetricResult) or hasattr(value, "is_score_valid"):
        return float(value.score) if value.is_score_valid and _is_number(value.score) else None
    return float(value) if _is_number(value) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
