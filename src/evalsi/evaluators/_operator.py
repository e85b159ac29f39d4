"""Params that reach outside the request, and resources a server's operator configures by name.

In-process the user is the operator and may set any param. On an evalsi server a request is untrusted data: a
param marked :data:`OPERATOR_ONLY` (a URL, a credential, headers or fields sent upstream) may not come from a
client, and an evaluator that needs one is given it by naming a resource of the server's config
(:class:`ServerResource`), such as a judge or a reward model.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

OPERATOR_ONLY: dict[str, Any] = {"operator_only": True}
"""Pass as ``Field(json_schema_extra=OPERATOR_ONLY)`` on a param that reaches outside the request; an evalsi
server refuses it from a client (403 naming the field) and takes it from its own config instead."""


@dataclass(frozen=True, slots=True)
class ServerResource:
    """How a component names a resource of the server's config instead of giving its operator-only params."""

    section: str
    """The ServerConfig section holding the resources by name (``judges``, ``reward_models``)."""
    param: str
    """The param whose string value names the resource."""
    nested: bool = False
    """True: the resource becomes that param's value (a judge's config). False: the resource's fields become the
    component's params, under the ones the client gives."""


def is_operator_only(model: type[BaseModel], name: str) -> bool:
    """Whether ``model``'s field ``name`` is marked :data:`OPERATOR_ONLY`.

    Args:
        model: A params model.
        name: One of its field names.

    """
    field = model.model_fields.get(name)
    extra = field.json_schema_extra if field is not None else None
    return isinstance(extra, Mapping) and bool(extra.get("operator_only"))


def operator_fields_set(model: type[BaseModel], raw: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """Paths (as written in ``raw``) of every operator-only field that ``raw`` sets, nested models included.

    Args:
        model: A params model.
        raw: Params as a spec wrote them.

    """
    found: list[tuple[str, ...]] = []
    for key, value in raw.items():
        name = _field_name(model, str(key))
        if name is None:
            continue  # unknown keys are the params validation's to report
        if is_operator_only(model, name):
            found.append((str(key),))
            continue
        nested = _model_of(model, name)
        if nested is not None and isinstance(value, Mapping):
            found.extend((str(key), *path) for path in operator_fields_set(nested, value))
    return found


def has_operator_fields(model: type[BaseModel]) -> bool:
    """Whether ``model`` or a model nested in it has an operator-only field (its defaults reach outside too).

    Args:
        model: A params model.

    """
    for name in model.model_fields:
        nested = _model_of(model, name)
        if is_operator_only(model, name) or (nested is not None and has_operator_fields(nested)):
            return True
    return False


def _field_name(model: type[BaseModel], key: str) -> str | None:
    if key in model.model_fields:
        return key
    for name, field in model.model_fields.items():
        if key in (field.alias, field.validation_alias):
            return name
    return None


def _model_of(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    """The pydantic model inside the field's type (``Model``, ``Model | None``, ``str | Model``), if any."""
    annotation = model.model_fields[name].annotation
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None
