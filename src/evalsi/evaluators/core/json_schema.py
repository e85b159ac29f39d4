"""``json-schema``: the completion is JSON that validates against a schema."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any, Literal

import orjson
from jsonschema import Draft202012Validator, SchemaError
from pydantic import Field, field_validator

from evalsi.evaluators._base import Evaluator, Params, ScoreContext
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import Score
from evalsi.records import Record

_FENCED_JSON = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)


class JsonSchemaParams(Params):
    """The schema and where the JSON is in the completion."""

    schema_: dict[str, Any] | bool = Field(alias="schema")
    """A JSON Schema (draft 2020-12)."""
    extract: Literal["auto", "whole", "fenced"] = "auto"
    """``whole``: the completion is the JSON; ``fenced``: the last ```json block; ``auto``: the last fenced
    block if there is one, else the whole completion."""

    @field_validator("schema_")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | bool) -> dict[str, Any] | bool:
        try:
            Draft202012Validator.check_schema(value)
        except SchemaError as exc:
            raise ValueError(f"not a valid JSON Schema: {exc.message}") from None
        return value


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema_json))


@register
class JsonSchema(Evaluator[JsonSchemaParams]):
    """Pass when the completion holds JSON valid against ``schema``; the details name the first violation."""

    name = "json-schema"
    summary = "The completion is JSON valid against a JSON Schema."
    params_model = JsonSchemaParams
    reads = ("completion",)

    def score(self, record: Record, params: JsonSchemaParams, ctx: ScoreContext) -> Score:
        """Pass/fail with the reason for a failure."""
        text = _extract(record.completion_text, params.extract)
        if text is None:
            return Score.ok(False, "no ```json block in the completion")
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            return Score.ok(False, f"not valid JSON: {exc}")
        validator = _validator(json.dumps(params.schema_, sort_keys=True))
        error = next(iter(validator.iter_errors(document)), None)
        if error is None:
            return Score.ok(True)
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return Score.ok(False, f"at {where}: {error.message}")


def _extract(text: str, mode: str) -> str | None:
    if mode == "whole":
        return text.strip()
    blocks = _FENCED_JSON.findall(text)
    if blocks:
        return str(blocks[-1]).strip()
    return None if mode == "fenced" else text.strip()
