"""Built-in evals: math500, aime_2024, aime_2025 and gpqa_diamond, with their loaders, prompts and evaluators.

Each reads its Hugging Face dataset in the published format: from ``dataset.path`` (the file, or a directory
holding it), else from the local Hugging Face hub cache, else through the ``datasets`` package (which downloads
it). Offline (``HF_HUB_OFFLINE``, or the hub not answering a connect within a few seconds) nothing waits on
download retries: an eval whose data is not here fails at once, saying where it looked, the command that
downloads it and where to put it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
import socket
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsi.errors import DataError
from evalsi.rewards import RowSource
from evalsi.runs._datasets import Item, item_key, load_hf, read_located_rows
from evalsi.specs import DatasetSpec

MATH_PROMPT = "{problem}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
"""The prompt of the math evals (the DeepSeek-R1 / Qwen math convention)."""

GPQA_PROMPT = (
    "Answer the following multiple choice question. The last line of your response should be of the following "
    "format: 'Answer: $LETTER' (without quotes) where LETTER is one of ABCD. Think step by step before "
    "answering.\n\n{question}\n\nA) {A}\nB) {B}\nC) {C}\nD) {D}"
)
"""The prompt of gpqa_diamond (the simple-evals multiple-choice template)."""

Row = Mapping[str, Any]
Mapped = tuple[str, Any, str | None, dict[str, Any]]
"""A row mapped to (prompt, reference, id, metadata)."""


@dataclass(frozen=True)
class BuiltinEval:
    """One built-in eval: where its data is published, how a row becomes a prompt, and how it is scored."""

    name: str
    repo: str
    files: tuple[tuple[str | None, str], ...]
    """(Hugging Face config, file name) pairs that make up the eval, in order."""
    split: str
    size: int
    map_row: Callable[[Row, str], Mapped]
    evaluators: tuple[dict[str, Any], ...]
    gated: bool = False
    """Hugging Face shows the files only to signed-in users who accepted the dataset's terms."""


def _math_row(problem_field: str, id_field: str | None) -> Callable[[Row, str], Mapped]:
    def mapped(row: Row, part: str) -> Mapped:
        problem = _text(row, problem_field)
        record_id = str(row[id_field]) if id_field and row.get(id_field) is not None else None
        keep = {k: v for k, v in row.items() if k not in (problem_field, "answer", "solution")}
        return MATH_PROMPT.format(problem=problem), str(row.get("answer", "")).strip(), record_id, keep

    return mapped


def _aime_2025_row(row: Row, part: str) -> Mapped:
    prompt, reference, _, keep = _math_row("question", None)(row, part)
    return prompt, reference, None, {**keep, "part": part}


def _gpqa_row(row: Row, part: str) -> Mapped:
    """Shuffle the four options with a seed taken from the record id, so every run shows the same order."""
    question = _text(row, "Question").strip()
    correct = _text(row, "Correct Answer").strip()
    options = [correct, *(_text(row, f"Incorrect Answer {i}").strip() for i in (1, 2, 3))]
    record_id = str(row.get("Record ID") or hashlib.sha256(question.encode()).hexdigest()[:16])
    seed = int.from_bytes(hashlib.sha256(record_id.encode()).digest()[:8], "big")
    random.Random(seed).shuffle(options)
    letter = "ABCD"[options.index(correct)]
    prompt = GPQA_PROMPT.format(question=question, **dict(zip("ABCD", options, strict=True)))
    keep = {k: row[k] for k in ("High-level domain", "Subdomain") if k in row}
    return prompt, letter, record_id, keep


def _text(row: Row, column: str) -> str:
    value = row.get(column)
    if value is None:
        raise KeyError(column)
    return str(value)


BUILTINS: dict[str, BuiltinEval] = {
    "math500": BuiltinEval(
        "math500",
        "HuggingFaceH4/MATH-500",
        ((None, "test.jsonl"),),
        "test",
        500,
        _math_row("problem", "unique_id"),
        ({"ref": "math-equiv"},),
    ),
    "aime_2024": BuiltinEval(
        "aime_2024",
        "HuggingFaceH4/aime_2024",
        ((None, "train-00000-of-00001.parquet"),),
        "train",
        30,
        _math_row("problem", "id"),
        ({"ref": "math-equiv"},),
    ),
    "aime_2025": BuiltinEval(
        "aime_2025",
        "opencompass/AIME2025",
        (("AIME2025-I", "aime2025-I.jsonl"), ("AIME2025-II", "aime2025-II.jsonl")),
        "test",
        30,
        _aime_2025_row,
        ({"ref": "math-equiv"},),
    ),
    "gpqa_diamond": BuiltinEval(
        "gpqa_diamond",
        "Idavidrein/gpqa",
        (("gpqa_diamond", "gpqa_diamond.csv"),),
        "train",
        198,
        _gpqa_row,
        ({"ref": "multiple-choice"},),
        gated=True,
    ),
}


def hub_cache_dirs() -> list[Path]:
    """Where Hugging Face keeps downloaded hub repositories (``HF_HUB_CACHE``, ``HF_HOME``, the default)."""
    candidates = [os.environ.get("HF_HUB_CACHE"), os.environ.get("HUGGINGFACE_HUB_CACHE")]
    home = os.environ.get("HF_HOME")
    candidates.append(str(Path(home) / "hub") if home else None)
    candidates.append(str(Path.home() / ".cache" / "huggingface" / "hub"))
    return [Path(c) for c in candidates if c]


def _find(file_name: str, roots: list[Path]) -> Path | None:
    for root in roots:
        if root.is_file() and root.name == file_name:
            return root
        if root.is_dir():
            found = sorted(root.rglob(file_name))
            if found:
                return found[0]
    return None


def _roots(builtin: BuiltinEval, path: Path | None) -> list[Path]:
    if path is not None:
        return [path]
    repo_dir = "datasets--" + builtin.repo.replace("/", "--")
    return [cache / repo_dir / "snapshots" for cache in hub_cache_dirs()]


HUB_PROBE_TIMEOUT = 3.0
"""Seconds a connect to the hub (or the proxy to it) may take before the hub counts as unreachable."""

_TRUE = frozenset({"1", "ON", "YES", "TRUE"})


@dataclass(frozen=True)
class Offline:
    """Why the Hugging Face hub is not used now."""

    reason: str
    chosen: bool
    """Set by the user (``HF_HUB_OFFLINE``): the ``datasets`` cache may still be read, quickly."""


def hub_offline() -> Offline | None:
    """Why the Hugging Face hub cannot be used now, or None when it answers a TCP connect.

    ``HF_HUB_OFFLINE`` (or ``HF_DATASETS_OFFLINE``) set, as ``huggingface_hub`` reads it, says so at once;
    otherwise one connect to ``HF_ENDPOINT`` (default https://huggingface.co), or to the proxy the environment
    names for it, decides within :data:`HUB_PROBE_TIMEOUT` seconds, where a download would retry for half a
    minute before failing.
    """
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(name, "").strip().upper() in _TRUE:
            return Offline(f"{name}={os.environ[name]} is set", chosen=True)
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    parts = urllib.parse.urlsplit(endpoint)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        via = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port, endpoint = via.hostname or "", via.port or 80, f"{endpoint} (through the proxy {proxy})"
    try:
        with socket.create_connection((host, port), timeout=HUB_PROBE_TIMEOUT):
            return None
    except OSError as exc:
        return Offline(f"the hub cannot be reached: {endpoint}: {exc.strerror or exc}", chosen=False)


def _part_rows(
    builtin: BuiltinEval, config: str | None, file_name: str, path: Path | None, offline: Callable[[], Offline | None]
) -> tuple[list[dict[str, Any]], RowSource]:
    if path is not None and path.is_file() and len(builtin.files) == 1:
        return read_located_rows(path)  # a single-file eval accepts its file under any name
    found = _find(file_name, _roots(builtin, path))
    if found is not None:
        return read_located_rows(found)
    state = offline()
    if state is not None and not state.chosen:
        raise DataError(_not_here(builtin, file_name, path, state.reason))  # no download would succeed: say so now
    try:
        return load_hf(builtin.repo, config, builtin.split), RowSource(f"hf:{builtin.repo}", unit="row")
    except DataError as exc:  # offline by choice, the `datasets` cache did not hold it either
        reason = state.reason if state is not None else f"loading it through `datasets` failed: {exc}"
    raise DataError(_not_here(builtin, file_name, path, reason))


def _not_here(builtin: BuiltinEval, file_name: str, path: Path | None, reason: str) -> str:
    """What is missing, where it was looked for, why it was not downloaded, and how to provide it."""
    where = str(path) if path is not None else ", ".join(dict.fromkeys(str(r) for r in _roots(builtin, None)))
    download = f"hf download {builtin.repo} --repo-type dataset"
    gated = (
        f" (a gated dataset: accept its terms at https://huggingface.co/datasets/{builtin.repo} and run "
        "`hf auth login` first)"
        if builtin.gated
        else ""
    )
    return (
        f"built-in eval {builtin.name!r} needs {file_name} from the Hugging Face dataset {builtin.repo}: it is not "
        f"in {where}, and it was not downloaded ({reason}).\n"
        f"To provide it, on a machine with network run{gated}\n"
        f"    {download} --local-dir {builtin.name}\n"
        f"then copy the {builtin.name} directory here and set dataset.path to it (the directory, or the file in "
        f"it); or, with network here, run `{download}` to fill the Hugging Face cache ({hub_cache_dirs()[0]}), "
        f"which evalsi reads without dataset.path. (Before huggingface_hub 0.34 the command is "
        f"`huggingface-cli download`.)"
    )


def load_builtin(spec: DatasetSpec, base_dir: Path | None = None) -> list[Item]:
    """The items of the built-in eval ``spec.builtin``, with its prompt format.

    Args:
        spec: The run's ``dataset``, with ``builtin`` set.
        base_dir: What a relative ``path`` is relative to.

    Raises:
        DataError: The data cannot be found, or a row lacks a column the format needs (names file and row).

    """
    builtin = BUILTINS[spec.builtin or ""]
    path = Path(spec.path) if spec.path is not None else None
    if path is not None and not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    items: list[Item] = []
    seen: set[str] = set()
    offline = functools.cache(hub_offline)  # asked at most once per load, and only when a file is not here
    for config, file_name in builtin.files:
        rows, source = _part_rows(builtin, config, file_name, path, offline)
        part = config or builtin.name
        for row_index, row in enumerate(rows):
            try:
                prompt, reference, record_id, metadata = builtin.map_row(row, part)
            except KeyError as exc:
                raise source.error(row_index, f"no column {exc} ({builtin.name} format)") from None
            if record_id is None:
                record_id = f"{part}-{row_index + 1}"
            key = item_key(prompt, reference, record_id)
            if key in seen:
                raise source.error(row_index, f"id {record_id!r} appears twice")
            seen.add(key)
            items.append(Item(key, len(items), prompt, reference, record_id, metadata))
    return items


def builtin_evaluators(name: str) -> list[dict[str, Any]]:
    """The evaluator components a built-in eval is scored with, as RunSpec ``evaluators`` entries."""
    return [dict(e) for e in BUILTINS[name].evaluators]
