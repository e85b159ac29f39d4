"""Content keys of component scores: evaluator name, canonical params and the record fields it reads."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from evalsi.records import Record, canonical_json


def params_fingerprint(evaluator_name: str, params: Any) -> bytes:
    """The prefix shared by every key of one component: evaluator name and canonical params."""
    dumped = params.model_dump(mode="json") if hasattr(params, "model_dump") else params
    return evaluator_name.encode() + b"\x00" + canonical_json(dumped) + b"\x00"


def record_key(prefix: bytes, record: Record, fields: Sequence[str]) -> bytes:
    """sha256 over the component prefix and the values of the fields the evaluator reads.

    Args:
        prefix: What identifies the component: evaluator, version and params.
        record: The record scored.
        fields: The record fields the evaluator reads.

    """
    values = [record.get(name) for name in fields]
    return hashlib.sha256(prefix + canonical_json(values)).digest()
