"""Resources: the ``apiVersion``/``kind``/``metadata``/``spec`` envelope shared by every evalsi YAML file."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalsi.errors import SpecError
from evalsi.specs._run import sample_count_hint
from evalsi.specs._yaml import Document, PathKey, format_path, load_yaml_documents, read_yaml_file

API_VERSION = "evals.si/v1alpha1"
"""The ``apiVersion`` every resource file declares."""
KINDS = ("RewardSpec", "RunSpec", "Task", "ServerConfig")
"""The resource kinds a file may hold."""


@dataclass
class Resource:
    """One resource document: its kind, name, raw ``spec`` mapping, and where it came from."""

    kind: str
    name: str
    spec: dict[str, Any]
    document: Document
    labels: dict[str, str]

    def error(self, message: str, path: PathKey) -> SpecError:
        """A SpecError pointing at ``path`` (relative to the document root) in this resource's file.

        Args:
            message: What is wrong and what would be valid.
            path: The field's path from the document root.

        """
        return SpecError(message, file=self.document.file, line=self.document.line_of(path), path=format_path(path))

    def validation_error(self, exc: ValidationError, root: PathKey = ("spec",)) -> SpecError:
        """Turn pydantic's first error into a SpecError with file, line and field path; list the others.

        Args:
            exc: pydantic's error.
            root: Where the validated model sits in the document.

        """
        errors = exc.errors(include_url=False)
        first = errors[0]
        path = (*root, *first["loc"])
        message = describe_pydantic_error(first)
        if self.kind == "RunSpec" and first["type"] == "extra_forbidden" and first["loc"]:
            message += sample_count_hint(str(first["loc"][-1]))
        if len(errors) > 1:
            others = "; ".join(f"{format_path((*root, *e['loc']))}: {describe_pydantic_error(e)}" for e in errors[1:4])
            message += f" (also: {others})"
        return self.error(message, path)


_SANDBOX_HINT = (
    "; the sandbox sits on a component: `sandbox: {minIsolation: gvisor}` beside its `ref` "
    "(spec.components[i] in a RewardSpec, spec.evaluators[i] in a RunSpec)"
)
_MISPLACED = {"sandbox": _SANDBOX_HINT, "minIsolation": _SANDBOX_HINT, "min_isolation": _SANDBOX_HINT}
"""Hints for fields written at the top of a spec that belong on each component."""


def describe_pydantic_error(error: Any) -> str:
    """A pydantic error as a sentence, with the offending input when it is short.

    Args:
        error: One entry of ``ValidationError.errors()``.

    """
    message = str(error["msg"])
    if error["type"] == "extra_forbidden":
        return "unknown field" + _MISPLACED.get(str(error["loc"][-1]) if len(error["loc"]) == 1 else "", "")
    value = error.get("input")
    said = "got " in message  # a validator's own message may name the input already
    if error["type"] not in ("missing",) and value is not None and len(repr(value)) <= 60 and not said:
        message += f" (got {value!r})"
    return message


def parse_resources(documents: list[Document]) -> list[Resource]:
    """Check each document's envelope and return it as a Resource.

    Args:
        documents: The parsed YAML documents.

    Raises:
        SpecError: A document is not a mapping, has the wrong ``apiVersion``, an unknown ``kind`` or no ``spec``.

    """
    resources: list[Resource] = []
    for document in documents:
        data = document.data
        if data is None:
            continue

        def fail(message: str, path: PathKey, doc: Document = document) -> SpecError:
            return SpecError(message, file=doc.file, line=doc.line_of(path), path=format_path(path))

        if not isinstance(data, dict):
            raise fail("a resource must be a mapping with apiVersion, kind, metadata and spec", ())
        unknown = set(data) - {"apiVersion", "kind", "metadata", "spec"}
        if unknown:
            key = sorted(unknown)[0]
            raise fail("unknown top-level field; a resource has apiVersion, kind, metadata and spec", (key,))
        if data.get("apiVersion") != API_VERSION:
            raise fail(f"apiVersion must be {API_VERSION!r} (got {data.get('apiVersion')!r})", ("apiVersion",))
        kind = data.get("kind")
        if kind not in KINDS:
            close = difflib.get_close_matches(str(kind), KINDS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise fail(f"unknown kind {kind!r}{hint} (valid: {', '.join(KINDS)})", ("kind",))
        metadata = data.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise fail("metadata must be a mapping such as {name: my-spec}", ("metadata",))
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            raise fail("metadata.name is required: a non-empty name for this resource", ("metadata",))
        for key in metadata:
            if key not in ("name", "labels"):
                raise fail("unknown field; metadata has name and labels", ("metadata", key))
        labels = metadata.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise fail("labels must map names to text, such as {team: math}", ("metadata", "labels"))
        spec = data.get("spec")
        if not isinstance(spec, dict):
            raise fail("spec is required and must be a mapping", ("spec",) if "spec" in data else ())
        resources.append(Resource(kind=kind, name=name, spec=spec, document=document, labels=dict(labels)))
    return resources


def load_resources(source: str | Path, *, text: str | None = None) -> list[Resource]:
    """Every resource in a YAML file (or in ``text``, with ``source`` naming it for messages).

    Args:
        source: The YAML file, or a name for ``text``.
        text: The YAML text; None reads ``source``.

    """
    documents = load_yaml_documents(text, str(source)) if text is not None else read_yaml_file(source)
    return parse_resources(documents)


def select_resource(resources: list[Resource], kind: str, name: str | None, file: str | None) -> Resource:
    """The one resource of ``kind`` (named ``name`` when several are present).

    Args:
        resources: The resources of one file.
        kind: The kind wanted (``RewardSpec``...).
        name: Its name; None when the file holds just one of ``kind``.
        file: The file, for error messages.

    """
    matching = [r for r in resources if r.kind == kind]
    if name is not None:
        named = [r for r in matching if r.name == name]
        if not named:
            names = ", ".join(r.name for r in matching) or "none"
            raise SpecError(f"no {kind} named {name!r} (found: {names})", file=file)
        return named[0]
    if not matching:
        raise SpecError(
            f"no {kind} in this file (kinds found: {', '.join(r.kind for r in resources) or 'none'})", file=file
        )
    if len(matching) > 1:
        names = ", ".join(r.name for r in matching)
        raise SpecError(f"several {kind} resources ({names}); choose one by name", file=file)
    return matching[0]


def document_from_mapping(data: dict[str, Any], source: str | None = None) -> Document:
    """A Document for a spec given as a Python mapping (no line numbers, field paths still reported).

    Args:
        data: The spec as a mapping.
        source: A name for it in error messages.

    """
    return Document(data=data, file=source, lines={}, start_line=0)
