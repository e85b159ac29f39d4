"""The pydantic base of every spec and config model: frozen, strict about unknown fields, camelCase or snake_case."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class SpecModel(BaseModel):
    """Base of the models behind YAML resources and configs.

    Unknown fields are errors (a typo must not be silently ignored), instances are frozen (a bound spec cannot
    drift from what was validated), each field is written in camelCase (``minIsolation``) or snake_case
    (``min_isolation``), and attribute docstrings become field descriptions (``evalsi evaluators describe``).
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True
    )
