"""Decoded request rollouts to records in one pass: the Reward Service's fast path to the engine's record type.

A request's rollouts arrive as JSON objects (plain dicts once decoded). The common shape (text ``prompt`` and
``completion``, a reference, perhaps ``id``, ``completion_tokens`` and metadata) is turned into a
:class:`~evalsi.records.Record` here with type checks only, no model validation; every other shape (chat
messages, ``completion_ids``, both spellings of an aliased field, a missing completion, a value of the wrong type,
a rollout that is not an object) goes through :func:`evalsi.records.from_rollout`, the one definition of the
rules, which also raises the error naming the rollout's index and field. Both give equal records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from evalsi.records import REFERENCE_FIELDS, Record, from_rollout

_CONSUMED = frozenset({"prompt", "input", "completion", "output", "completion_tokens", "completion_ids", "id"})
"""Fields a record takes apart from its reference (:func:`evalsi.records.from_rollout` keeps the rest as metadata)."""

_FIELDS = ("completion", "prompt", "reference", "completion_tokens", "id", "metadata")


def _maker() -> Callable[[Any, Any, Any, Any, Any, Any], Record]:
    """A constructor of records taking every field in order, without the frozen dataclass's ``__init__``.

    That ``__init__`` sets each field through ``object.__setattr__`` (frozen classes refuse plain assignment),
    about half of a record's cost here; the slots' own setters do the same in C. Should the record type ever
    change its fields, its own constructor is used.
    """
    if tuple(f.name for f in dataclasses.fields(Record)) != _FIELDS or "__post_init__" in vars(Record):
        return Record
    new = object.__new__
    completion, prompt, reference, tokens, id_, metadata = (vars(Record)[name].__set__ for name in _FIELDS)

    def make(c: Any, p: Any, r: Any, t: Any, i: Any, m: Any) -> Record:
        record: Record = new(Record)
        completion(record, c)
        prompt(record, p)
        reference(record, r)
        tokens(record, t)
        id_(record, i)
        metadata(record, m)
        return record

    return make


_make = _maker()


def records_of(rollouts: Sequence[Any], reference_field: str | None = None) -> list[Record]:
    """The records of a request's rollouts, equal to ``from_rollout`` of each.

    Args:
        rollouts: The decoded rollouts (JSON objects are dicts; anything else is refused with its index).
        reference_field: The spec's ``referenceField``, if any.

    Returns:
        One record per rollout, in order.

    Raises:
        DataError: A rollout is malformed; the message names its index and the field.

    """
    references = REFERENCE_FIELDS if reference_field is None else (reference_field,)
    consumed = _CONSUMED
    # with the reference's field, a rollout's keys are often all taken (no metadata): one subset test says so
    flat: dict[str | None, frozenset[str]] = {key: consumed | {key} for key in references}
    flat[None] = consumed
    make = _make
    out: list[Record] = []
    append = out.append
    for index, rollout in enumerate(rollouts):
        if type(rollout) is not dict:
            append(from_rollout(rollout, reference_field=reference_field, index=index))
            continue
        get = rollout.get
        completion = get("completion")
        if completion is None:
            completion = get("output")
        prompt = get("prompt")
        if prompt is None:
            prompt = get("input")
        tokens = get("completion_tokens")
        if (
            type(completion) is not str
            or (prompt is not None and type(prompt) is not str)
            or (tokens is not None and (type(tokens) is not int or tokens < 0))
            or "completion_ids" in rollout
            or ("prompt" in rollout and "input" in rollout)
            or ("completion" in rollout and "output" in rollout)
        ):  # any other shape, and every error, is from_rollout's
            append(from_rollout(rollout, reference_field=reference_field, index=index))
            continue
        reference_key = None
        for key in references:
            if get(key) is not None:
                reference_key = key
                break
        raw_id = get("id")
        if rollout.keys() <= flat[reference_key]:
            metadata: dict[str, Any] = {}
        else:
            metadata = {k: v for k, v in rollout.items() if k not in consumed and k != reference_key}
        append(
            make(
                completion,
                prompt,
                None if reference_key is None else rollout[reference_key],
                tokens,
                None if raw_id is None else str(raw_id),
                metadata,
            )
        )
    return out
