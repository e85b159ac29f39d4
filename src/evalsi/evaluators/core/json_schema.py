"""``json-schema``: the completion is JSON that validates against a schema.

The schema is untrusted data: ``$ref`` resolves only within the schema (``#/$defs/...``, ``#anchor``) through a
registry that never reads a file or fetches a URL, and ``pattern`` / ``patternProperties`` run on the linear-time
regex engine of :mod:`evalsi.evaluators._patterns`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import orjson
from jsonschema import SchemaError
from pydantic import Field, field_validator
from referencing.exceptions import Unresolvable

from evalsi._util.lru import ByteLRU
from evalsi.evaluators._base import Evaluator, Params, ScoreContext
from evalsi.evaluators._registry import register
from evalsi.evaluators._score import Score
from evalsi.evaluators.core._schema import check_untrusted_schema, safe_validator
from evalsi.records import Record

_FENCED_JSON = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)


class JsonSchemaParams(Params):
    """The schema and where the JSON is in the completion."""

    schema_: dict[str, Any] | bool = Field(alias="schema")
    """A JSON Schema (draft 2020-12). ``$ref`` must point within it (``#/$defs/...``); patterns use RE2 syntax."""
    extract: Literal["auto", "whole", "fenced"] = "auto"
    """``whole``: the completion is the JSON; ``fenced``: the last ```json block; ``auto``: the last fenced
    block if there is one, else the whole completion."""

    @field_validator("schema_")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | bool) -> dict[str, Any] | bool:
        try:
            check_untrusted_schema(value)
        except SchemaError as exc:
            raise ValueError(f"not a valid JSON Schema: {exc.message}") from None
        return value


_validators: ByteLRU[str, Any] = ByteLRU(max_bytes=64 << 20, max_entries=256)
"""Validators by canonical schema text; a parsed schema is counted at 16 bytes per character of its JSON."""


def _validator(schema_json: str) -> Any:
    cost = 16 * len(schema_json)
    return _validators.get_or_make(schema_json, lambda: safe_validator(json.loads(schema_json)), lambda _: cost)


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
        try:
            error = next(iter(validator.iter_errors(document)), None)
        except Unresolvable as exc:
            ref = str(getattr(exc, "ref", ""))[:200]
            return Score.error(f"json-schema: $ref {ref!r} does not resolve within the schema")
        except RecursionError:
            return Score.error("json-schema: the schema's $ref chain loops without reaching a check")
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
