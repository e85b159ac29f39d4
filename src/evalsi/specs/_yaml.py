"""YAML loading that remembers where every value came from, so errors can name the file and line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evalsi.errors import SpecError

PathKey = tuple[str | int, ...]


@dataclass
class Document:
    """One YAML document: its data, and the line of each field path (1-based)."""

    data: Any
    file: str | None
    lines: dict[PathKey, int] = field(default_factory=dict)
    start_line: int = 1

    def line_of(self, path: PathKey) -> int | None:
        """The line of the deepest known prefix of ``path`` (a bad field inside a value points at the value).

        Args:
            path: A field path from the document root.

        """
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return self.start_line


def format_path(path: PathKey) -> str:
    """``("spec", "components", 1, "weight")`` -> ``spec.components[1].weight``.

    Args:
        path: Keys and indices from the document root.

    """
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def load_yaml_documents(text: str, file: str | None = None) -> list[Document]:
    """Parse every document of a (multi-document) YAML text, with a line map for each.

    Raises:
        SpecError: The text is not valid YAML, or a mapping repeats a key.

    """
    loader = yaml.SafeLoader(text)
    documents: list[Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            lines: dict[PathKey, int] = {}
            _walk(node, (), lines, file)
            data = loader.construct_document(node)
            documents.append(Document(data=data, file=file, lines=lines, start_line=node.start_mark.line + 1))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise SpecError(f"invalid YAML: {exc.problem or exc}", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"invalid YAML: {exc}", file=file) from None
    finally:
        loader.dispose()
    return documents


def read_yaml_file(path: str | Path) -> list[Document]:
    """Read and parse a YAML file; a missing file is a SpecError naming it."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("no such file", file=file) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read: {exc}", file=file) from None
    return load_yaml_documents(text, file)


def _walk(node: yaml.Node, path: PathKey, lines: dict[PathKey, int], file: str | None) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen and key != "<<":
                raise SpecError(
                    f"duplicate key {key!r} (first at line {seen[key]}); each key may appear once",
                    file=file,
                    line=line,
                    path=format_path(path),
                )
            seen[key] = line
            child = (*path, key)
            _walk(value_node, child, lines, file)
            lines[child] = line
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), lines, file)
