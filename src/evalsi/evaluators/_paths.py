"""Params that name a file: relative to the spec file that sets them, like every other path inside a spec.

A path written in a spec is relative to that spec's folder; a path given on the command line or to a Python API is
relative to the working directory. An evaluator marks the params that name a file (``task-checker``'s ``task``)
with :data:`SPEC_PATH`, and binding a spec loaded from a file makes those params absolute against its folder, so
the evaluator never depends on where the command was started.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

SPEC_PATH: dict[str, Any] = {"spec_path": True}
"""Pass as ``Field(json_schema_extra=SPEC_PATH)`` on a ``str`` param that names a file: a relative value is
resolved against the folder of the spec file that sets it."""


def spec_path_params(model: type[BaseModel]) -> list[str]:
    """The names of ``model``'s params marked :data:`SPEC_PATH`, as a spec may spell them (name and alias).

    Args:
        model: A params model.

    """
    names: list[str] = []
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra
        if isinstance(extra, Mapping) and extra.get("spec_path"):
            names += [name, *([field.alias] if field.alias and field.alias != name else [])]
    return names


def resolve_spec_paths(model: type[BaseModel], raw: Mapping[str, Any], base_dir: Path | None) -> dict[str, Any]:
    """``raw`` params with each relative :data:`SPEC_PATH` param made absolute against ``base_dir``.

    ``base_dir`` None (a spec given as a Python mapping) leaves them relative to the working directory.

    Args:
        model: The evaluator's params model.
        raw: Params as the spec wrote them.
        base_dir: The spec file's folder; None leaves paths as written.

    """
    out = dict(raw)
    if base_dir is None:
        return out
    for name in spec_path_params(model):
        value = out.get(name)
        if isinstance(value, str) and value:
            path = Path(value).expanduser()
            out[name] = str(path if path.is_absolute() else base_dir.absolute() / path)
    return out
