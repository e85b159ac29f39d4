"""Provider-prefixed model names in completion params: ``openai/gpt-4o-mini``, ``fireworks_ai/accounts/...``.

A completion-params entry without ``base_url`` whose ``model`` is ``PROVIDER/NAME`` reaches that provider's
OpenAI-compatible endpoint with the model ``NAME`` (the part after the first ``/``, as litellm sends it). Where
the provider is, first found:

1. the environment: ``<PROVIDER>_BASE_URL`` (the name upper-cased, every other character than a letter or digit
   as ``_``: ``FIREWORKS_AI_BASE_URL``);
2. the providers file that ``EVALSI_PROVIDERS`` names (YAML or JSON)::

       providers:
         fireworks_ai: {base_url: "https://api.fireworks.ai/inference/v1", api_key_env: FIREWORKS_API_KEY}
         lab: {base_url: "http://10.0.0.2:8000/v1"}         # no key: none is sent

3. the built-in providers (:data:`BUILT_IN`).

The key is read from the variable the entry's own ``api_key_env`` names, else ``<PROVIDER>_API_KEY`` when it is
set, else the variable the providers file or the built-in table names (with ``<PROVIDER>_BASE_URL``, none: a local
server needs no key); a key variable named but not set is an error at once, naming it. An entry that gives
``base_url`` is sent exactly as written: a served model named ``Qwen/Qwen3-8B`` keeps its slash.

This runs where the test runs, for the user who runs it: URLs and keys come from that user's environment and
files. An evaluator uploaded to an evalsi server never resolves them (the server generates only with its
operator's targets).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsi.errors import SpecError
from evalsi.specs._yaml import format_path, read_yaml_file
from evalsi.testing._config import EvaluationSetupError

PROVIDERS_FILE = "EVALSI_PROVIDERS"
"""The environment variable naming the providers file."""


@dataclass(frozen=True)
class Provider:
    """Where a provider's OpenAI-compatible endpoint is, and which environment variable holds its key."""

    base_url: str
    api_key_env: str | None = None


BUILT_IN: dict[str, Provider] = {
    "openai": Provider("https://api.openai.com/v1", "OPENAI_API_KEY"),
    "fireworks_ai": Provider("https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
    "together_ai": Provider("https://api.together.xyz/v1", "TOGETHER_API_KEY"),
    "groq": Provider("https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    "openrouter": Provider("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "deepseek": Provider("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    "mistral": Provider("https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
}
"""Hosted providers known by name (each needs its key)."""

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")


def variable_prefix(provider: str) -> str:
    """``fireworks_ai`` -> ``FIREWORKS_AI``: the prefix of the provider's ``_BASE_URL`` and ``_API_KEY`` variables."""
    return re.sub(r"[^A-Za-z0-9]", "_", provider).upper()


def resolve(params: Mapping[str, Any], where: str = "completion_params") -> dict[str, Any]:
    """The params with ``base_url``, ``api_key_env`` and the provider's own model name filled in.

    Params that give ``base_url`` come back unchanged.

    Raises:
        EvaluationSetupError: There is no ``model``, the model names no known provider, the providers file is
            invalid, or a built-in provider's key variable is not set (each message says what would be valid).

    """
    resolved = dict(params)
    if resolved.get("base_url"):
        return resolved
    model = resolved.get("model")
    if not isinstance(model, str) or not model:
        raise EvaluationSetupError(f"{where}: give `model` (and `base_url`, or a model named PROVIDER/NAME)")
    name, slash, rest = model.partition("/")
    if not slash or not rest or not _NAME.fullmatch(name):
        raise EvaluationSetupError(
            f"{where}.model {model!r}: give `base_url`, or name the model PROVIDER/NAME "
            f"(a provider of {PROVIDERS_FILE}, <PROVIDER>_BASE_URL, or one of {', '.join(BUILT_IN)})"
        )
    provider = find(name, where=f"{where}.model {model!r}")
    resolved["base_url"] = provider.base_url
    resolved["model"] = rest
    own = f"{variable_prefix(name)}_API_KEY"
    key = resolved.get("api_key_env") or (own if os.environ.get(own) else provider.api_key_env)
    if key:
        if not os.environ.get(str(key)):
            raise EvaluationSetupError(f"{where}.model {model!r}: set {key} (the API key of provider {name!r})")
        resolved["api_key_env"] = key
    return resolved


def find(name: str, where: str = "provider") -> Provider:
    """The provider called ``name``: from the environment, else the providers file, else the built-in table.

    Raises:
        EvaluationSetupError: No such provider, or the providers file is invalid.

    """
    prefix = variable_prefix(name)
    from_environment = os.environ.get(f"{prefix}_BASE_URL")
    if from_environment:
        return Provider(from_environment)  # its key, if any, is <PROVIDER>_API_KEY
    configured = providers_file()
    if name in configured:
        return configured[name]
    if name in BUILT_IN:
        return BUILT_IN[name]
    listed = sorted({*configured, *BUILT_IN})
    raise EvaluationSetupError(
        f"{where}: {name!r} is not a provider: set {prefix}_BASE_URL (and {prefix}_API_KEY), add it to the "
        f"file {PROVIDERS_FILE} names, or give `base_url` (providers: {', '.join(listed)})"
    )


def providers_file() -> dict[str, Provider]:
    """The providers of the file ``EVALSI_PROVIDERS`` names (none when it is unset).

    Raises:
        EvaluationSetupError: The file is missing or not ``{providers: {NAME: {base_url, api_key_env}}}``
            (names the file, line and field).

    """
    path = os.environ.get(PROVIDERS_FILE)
    if not path:
        return {}
    try:
        documents = read_yaml_file(Path(path))
    except (SpecError, OSError) as exc:
        raise EvaluationSetupError(f"{PROVIDERS_FILE}: {exc}") from None
    if len(documents) != 1 or not isinstance(documents[0].data, dict):
        raise EvaluationSetupError(f"{path}: expected one mapping with `providers: {{NAME: {{base_url, ...}}}}`")
    document = documents[0]

    def fail(field: tuple[str | int, ...], message: str) -> EvaluationSetupError:
        line = document.line_of(field)
        return EvaluationSetupError(f"{path}{f':{line}' if line else ''}: {format_path(field)}: {message}")

    unknown = set(document.data) - {"providers"}
    if unknown:
        raise fail((sorted(map(str, unknown))[0],), "unknown field (the file holds `providers`)")
    entries = document.data.get("providers") or {}
    if not isinstance(entries, dict):
        raise fail(("providers",), "a mapping of provider names to {base_url, api_key_env}")
    found: dict[str, Provider] = {}
    for name, entry in entries.items():
        field: tuple[str | int, ...] = ("providers", str(name))
        if not _NAME.fullmatch(str(name)):
            raise fail(field, "a provider name is a letter, then letters, digits, '_', '-' or '.'")
        if not isinstance(entry, dict) or set(entry) - {"base_url", "api_key_env"}:
            raise fail(field, "a mapping with `base_url` and, optionally, `api_key_env`")
        base_url, key = entry.get("base_url"), entry.get("api_key_env")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise fail((*field, "base_url"), "an http:// or https:// URL")
        if key is not None and not (isinstance(key, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key)):
            raise fail((*field, "api_key_env"), "the name of an environment variable (never the key itself)")
        found[str(name)] = Provider(base_url, key)
    return found
