"""The judge's prompt template: ``{{name}}`` placeholders filled from the record.

Names: ``prompt`` (text as is; chat messages as ``role: content`` lines), ``completion`` (its text: the last
assistant message of a chat), ``reference`` (text as is, anything else as JSON), ``rubric`` and ``format`` (from
the config), and ``metadata.KEY`` or a bare ``KEY`` for any other rollout field. Nothing else in the template is
interpreted, so JSON examples with single braces are safe.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from evalsi.records import Record, content_text

FIXED_FIELDS = frozenset({"prompt", "completion", "reference", "rubric", "format"})
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][\w.-]*)\s*\}\}")

DEFAULT_TEMPLATE = """Grade the response below.
{{rubric}}

[Question]
{{prompt}}

[Response]
{{completion}}

{{format}}"""

DEFAULT_TEMPLATE_WITH_REFERENCE = """Grade the response below against the reference answer.
{{rubric}}

[Question]
{{prompt}}

[Reference answer]
{{reference}}

[Response]
{{completion}}

{{format}}"""


class MissingField(Exception):
    """The template needs a field the record lacks; ``skip`` means the judge does not apply (no reference)."""

    def __init__(self, message: str, *, skip: bool) -> None:
        super().__init__(message)
        self.skip = skip


def placeholders(template: str) -> set[str]:
    """The names a template uses."""
    return {m.group(1) for m in _PLACEHOLDER.finditer(template)}


def record_fields(template: str) -> tuple[str, ...]:
    """The record fields a template reads (its cache key), e.g. ``("completion", "metadata.topic")``."""
    fields = set()
    for name in placeholders(template):
        if name in ("prompt", "completion", "reference"):
            fields.add(name)
        elif name not in FIXED_FIELDS:
            fields.add(name if name.startswith("metadata.") else f"metadata.{name}")
    return tuple(sorted(fields))


def render(template: str, record: Record, rubric: str, format_hint: str) -> str:
    """Fill the template from the record.

    Raises:
        MissingField: The template uses the reference (``skip``) or a metadata key the record does not have.

    """

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "prompt":
            return prompt_text(record)
        if name == "completion":
            return record.completion_text
        if name == "rubric":
            return rubric
        if name == "format":
            return format_hint
        if name == "reference":
            if record.reference is None:
                raise MissingField("the judge's template uses {{reference}} and the rollout has none", skip=True)
            return _text(record.reference)
        key = name.removeprefix("metadata.")
        if key not in record.metadata:
            raise MissingField(f"the judge's template uses {{{{{name}}}}} and the rollout has no {key!r}", skip=False)
        return _text(record.metadata[key])

    return _PLACEHOLDER.sub(value, template)


def prompt_text(record: Record) -> str:
    """The prompt as the judge reads it: text as is, chat messages one ``role: content`` line each."""
    if record.prompt is None:
        return ""
    if isinstance(record.prompt, str):
        return record.prompt
    return "\n".join(f"{m.get('role', 'user')}: {content_text([m])}" for m in record.prompt)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
