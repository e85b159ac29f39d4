"""``JSON``: the type of data that crosses a wire or a file as JSON (decoded by orjson, encoded back)."""

from __future__ import annotations

from typing import TypeAlias

JSON: TypeAlias = "dict[str, JSON] | list[JSON] | str | int | float | bool | None"
"""A JSON value: objects, arrays, strings, numbers, booleans and null, nested to any depth."""

JSONObject: TypeAlias = "dict[str, JSON]"
"""A JSON object, the shape of request bodies, result rows and resource mappings."""
