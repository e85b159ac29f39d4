"""The pydantic base of every spec and config model: frozen, strict about unknown fields, camelCase or snake_case."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from evalsi._util.docstrings import describe_fields


class SpecModel(BaseModel):
    """Base of the models behind YAML resources and configs.

    Unknown fields are errors (a typo must not be silently ignored), instances are frozen (a bound spec cannot
    drift from what was validated), each field is written in camelCase (``minIsolation``) or snake_case
    (``min_isolation``), and attribute docstrings become field descriptions (``evalsi evaluators describe``).
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True, defer_build=True
    )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Describe the new model's fields by their docstrings (its schema is built on first use, with them)."""
        super().__pydantic_init_subclass__(**kwargs)
        describe_fields(cls)
