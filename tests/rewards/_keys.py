"""Adapter answers without the reward vector, weights and latency keys, for tests about the other keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

VECTOR_PREFIXES = ("reward/", "reward_weight/")


def without_vector(item: Mapping[str, Any]) -> dict[str, Any]:
    """``item`` without its ``reward/...`` and ``reward_weight/...`` keys."""
    return {key: value for key, value in item.items() if not key.startswith(VECTOR_PREFIXES)}


def without_vector_logs(answer: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenRLHF answer whose ``extra_logs`` lost its ``reward/...`` and ``reward_weight/...`` keys."""
    return {**answer, "extra_logs": without_vector(answer["extra_logs"])}
