"""Attribute docstrings become field descriptions exactly as pydantic's ``use_attribute_docstrings`` makes them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from evalsi._util.docstrings import attribute_docstrings
from evalsi.evaluators import Params
from evalsi.specs._model import SpecModel


class Pydantics(BaseModel):
    """The reference: pydantic's own extraction."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    plain: int = 0
    """One line."""
    indented: str = "x"
    """First line.

    Second paragraph,
        an indented line.
    """
    explicit: int = Field(default=1, description="given")
    """Not used: the explicit description wins."""
    undocumented: int = 2
    after_a_blank: int = 3

    """A string after a blank line still follows the attribute."""


class Ours(SpecModel):
    """The same body on evalsi's base."""

    plain: int = 0
    """One line."""
    indented: str = "x"
    """First line.

    Second paragraph,
        an indented line.
    """
    explicit: int = Field(default=1, description="given")
    """Not used: the explicit description wins."""
    undocumented: int = 2
    after_a_blank: int = 3

    """A string after a blank line still follows the attribute."""


def descriptions(model: type[BaseModel]) -> dict[str, str | None]:
    return {name: info.description for name, info in model.model_fields.items()}


def schema_descriptions(model: type[BaseModel]) -> dict[str, Any]:
    return {name: prop.get("description") for name, prop in model.model_json_schema()["properties"].items()}


def test_descriptions_and_schema_match_pydantics_own() -> None:
    assert descriptions(Ours) == descriptions(Pydantics)
    assert descriptions(Ours)["indented"] == "First line.\n\nSecond paragraph,\n    an indented line."
    assert descriptions(Ours)["explicit"] == "given" and descriptions(Ours)["undocumented"] is None
    assert list(schema_descriptions(Ours).values()) == list(schema_descriptions(Pydantics).values())


def test_a_subclass_keeps_inherited_descriptions_and_adds_its_own() -> None:
    class Child(Ours):
        extra: bool = False
        """Only on the child."""
        plain: int = 5

    assert descriptions(Child)["extra"] == "Only on the child."
    assert descriptions(Child)["indented"] == descriptions(Ours)["indented"]
    assert descriptions(Child)["plain"] is None  # redeclared without a docstring, as pydantic does


def test_params_defined_in_a_function_and_nested_in_a_class() -> None:
    class Outer:
        class Inner(Params):
            depth: int = 1
            """Nested."""

    class Local(Params):
        count: int = 0
        """Local."""

    assert descriptions(Outer.Inner) == {"depth": "Nested."}
    assert descriptions(Local) == {"count": "Local."}
    assert Local.model_json_schema()["properties"]["count"]["description"] == "Local."


def make(variant: int) -> type[SpecModel]:
    if variant == 1:

        class Twice(SpecModel):
            value: int = 1
            """The first."""

    else:

        class Twice(SpecModel):  # type: ignore[no-redef]
            value: int = 2
            """The second."""

    return Twice


def test_a_name_defined_twice_takes_the_docstrings_of_the_definition_that_ran() -> None:
    assert descriptions(make(1)) == {"value": "The first."}
    assert descriptions(make(2)) == {"value": "The second."}


def test_a_model_without_source_has_no_descriptions() -> None:
    made = create_model("Made", __base__=SpecModel, size=(int, 0))
    assert descriptions(made) == {"size": None}
    assert attribute_docstrings(type("Bare", (), {})) == {}
    assert made.model_validate({"size": 3}).model_dump() == {"size": 3}
