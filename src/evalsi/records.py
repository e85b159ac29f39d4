"""Records: the one normalised form of a rollout that every evaluator reads.

Every entry point (a TRL batch, a verl call, an OpenRLHF query, a JSONL line, an RPC message, a generated
sample) turns its rollout into a :class:`Record` with :func:`from_rollout`, so the rules below live in one place:

- ``prompt`` (or ``input``) and ``completion`` (or ``output``) are text or chat messages;
- the reference is ``reference_field`` when given, else the first present of ``reference``, ``ground_truth``,
  ``answer``, ``solution``, ``label``;
- the token count is ``completion_tokens``, else ``len(completion_ids)``;
- ``id`` is kept for pairing; everything else (test cases, data source, ...) goes to ``metadata``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from evalsi.errors import DataError

REFERENCE_FIELDS: tuple[str, ...] = ("reference", "ground_truth", "answer", "solution", "label")
"""Where the reference is looked for, in order, when the spec names no ``referenceField``."""

Messages = list[dict[str, Any]]
Content = str | Messages

_CONSUMED_ALWAYS = frozenset({"prompt", "input", "completion", "output", "completion_tokens", "completion_ids", "id"})
READ_FIELDS: frozenset[str] = _CONSUMED_ALWAYS | frozenset(REFERENCE_FIELDS)
"""The fields :func:`from_rollout` may read into a record's own fields when the spec names no ``referenceField``;
a rollout with none of them keeps every other field as metadata as is."""


@dataclass(frozen=True, slots=True)
class Record:
    """One rollout, normalised.

    ``completion_text`` is what text evaluators read: the completion itself, or the content of the last
    assistant message of a chat completion.
    """

    completion: Content
    prompt: Content | None = None
    reference: Any = None
    completion_tokens: int | None = None
    id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def completion_text(self) -> str:
        """The completion as text: a string as is, or the last assistant message's text content."""
        return content_text(self.completion)

    @property
    def prompt_text(self) -> str:
        """The prompt as text: a string as is, or the chat messages joined by newlines."""
        if self.prompt is None:
            return ""
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n".join(_message_text(m) for m in self.prompt)

    def get(self, name: str) -> Any:
        """Read a field by name.

        Names: ``completion``, ``prompt``, ``reference``, ``completion_tokens``, ``id``, ``metadata``, or
        ``metadata.<key>`` (None when the key is absent).

        Args:
            name: A field name (``prompt``, ``completion``, ``reference``, ``metadata.KEY``...).

        """
        if name.startswith("metadata."):
            return self.metadata.get(name[len("metadata.") :])
        if name == "completion_text":
            return self.completion_text
        return getattr(self, name)

    def content_hash(self) -> str:
        """A stable sha256 over the record's content, used for pairing when it has no ``id``."""
        payload = (self.prompt, self.completion, self.reference, self.completion_tokens, dict(self.metadata))
        return hashlib.sha256(canonical_json(payload)).hexdigest()

    @property
    def pairing_key(self) -> str:
        """The key that pairs this record across runs: its ``id`` when given, else its content hash."""
        return self.id if self.id is not None else self.content_hash()

    def __reduce__(self) -> tuple[type[Record], tuple[Any, ...]]:
        """Pickle as a constructor call: several times faster than a slotted dataclass's per-field state.

        Records cross process boundaries in bulk (a Ray reward pool sends each batch to an actor).
        """
        return (Record, (self.completion, self.prompt, self.reference, self.completion_tokens, self.id, self.metadata))


def canonical_json(value: Any) -> bytes:
    """Serialise a value deterministically (sorted keys; unknown types by ``str``) for hashing.

    Args:
        value: Any JSON-like value.

    """
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str)


def content_text(content: Content | None) -> str:
    """The text of a completion: the string itself, or the last assistant message's text content.

    Args:
        content: A string or a list of chat messages.

    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    for message in reversed(content):
        if message.get("role", "assistant") == "assistant":
            return _message_text(message)
    return _message_text(content[-1]) if content else ""


def _message_text(message: Mapping[str, Any]) -> str:
    """Text of one chat message; multi-part content keeps its text parts, joined."""
    body = message.get("content")
    if body is None:
        return ""
    if isinstance(body, str):
        return body
    if isinstance(body, list):
        parts = [p.get("text", "") for p in body if isinstance(p, Mapping) and p.get("type", "text") == "text"]
        return "".join(str(p) for p in parts)
    return str(body)


def from_rollout(rollout: Mapping[str, Any], *, reference_field: str | None = None, index: int | None = None) -> Record:
    """Normalise one rollout mapping into a :class:`Record`.

    Args:
        rollout: The rollout: ``prompt``/``input``, ``completion``/``output``, a reference, token counts, anything else.
        reference_field: The field that holds the reference (the spec's ``referenceField``), if any.
        index: The rollout's position in its batch, named in errors.

    Raises:
        DataError: The rollout is not a mapping, has no completion, or a field has the wrong type.

    """
    if not isinstance(rollout, Mapping):
        raise DataError(f"a rollout must be a mapping (JSON object), got {type(rollout).__name__}", index=index)
    completion = _pick(rollout, "completion", "output")
    if completion is None:
        raise DataError(
            "has no 'completion' (or 'output') field; every rollout needs the model's completion", index=index
        )
    completion = _check_content(completion, "completion", index)
    prompt = _pick(rollout, "prompt", "input")
    if prompt is not None:
        prompt = _check_content(prompt, "prompt", index)

    reference_key = _reference_key(rollout, reference_field)
    reference = rollout[reference_key] if reference_key is not None else None
    tokens = _token_count(rollout, index)
    raw_id = rollout.get("id")
    record_id = None if raw_id is None else str(raw_id)

    metadata = {k: v for k, v in rollout.items() if k not in _CONSUMED_ALWAYS and k != reference_key}
    # `input`/`output` are aliases: when both spellings are given, the unused one stays visible as metadata.
    for primary, alias in (("prompt", "input"), ("completion", "output")):
        if primary in rollout and alias in rollout:
            metadata[alias] = rollout[alias]
    return Record(
        completion=completion,
        prompt=prompt,
        reference=reference,
        completion_tokens=tokens,
        id=record_id,
        metadata=metadata,
    )


def _pick(rollout: Mapping[str, Any], primary: str, alias: str) -> Any:
    value = rollout.get(primary)
    return rollout.get(alias) if value is None else value


def _reference_key(rollout: Mapping[str, Any], reference_field: str | None) -> str | None:
    if reference_field is not None:
        return reference_field if rollout.get(reference_field) is not None else None
    for key in REFERENCE_FIELDS:
        if rollout.get(key) is not None:
            return key
    return None


def _check_content(value: Any, name: str, index: int | None) -> Content:
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence) and all(isinstance(m, Mapping) for m in value):
        for position, message in enumerate(value):
            if "content" not in message and "tool_calls" not in message:
                raise DataError(f"{name}[{position}] is a chat message without 'content'", index=index)
        return [dict(m) for m in value]
    raise DataError(
        f"'{name}' must be text or a list of chat messages ({{role, content}}), got {type(value).__name__}",
        index=index,
    )


def _token_count(rollout: Mapping[str, Any], index: int | None) -> int | None:
    tokens = rollout.get("completion_tokens")
    if tokens is not None:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise DataError(f"'completion_tokens' must be a non-negative integer, got {tokens!r}", index=index)
        return tokens
    ids = rollout.get("completion_ids")
    if ids is not None:
        if not isinstance(ids, Sequence) or isinstance(ids, str):
            raise DataError(f"'completion_ids' must be a list of token ids, got {type(ids).__name__}", index=index)
        return len(ids)
    return None


def reference_options(reference: Any) -> list[str]:
    """The answers a reference accepts, as text: a list (or tuple) accepts any of its items; None accepts nothing.

    Args:
        reference: A record's reference.

    Example:
        >>> reference_options(["4", 4.0, None]), reference_options("x"), reference_options(None)
        (['4', '4.0'], ['x'], [])

    """
    if reference is None:
        return []
    items = reference if isinstance(reference, list | tuple) else [reference]
    return [str(item) for item in items if item is not None]
