"""Translation between the protobuf messages, plain JSON data and the library's results.

``google.protobuf.Struct`` carries every number as a double; integral numbers are turned back into ints, so a
rollout's ``completion_tokens: 12`` reaches the records (and the cache keys) as it does over HTTP JSON.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format, struct_pb2

from evalsi.rewards import RewardResult
from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb


def plain_numbers(value: Any) -> Any:
    """``value`` with integral floats made ints, recursively (Struct has no integer type)."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and math.isfinite(value) and abs(value) < 2**53 else value
    if isinstance(value, dict):
        return {k: plain_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_numbers(v) for v in value]
    return value


def struct_to_dict(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as a plain dict."""
    return plain_numbers(json_format.MessageToDict(struct))  # type: ignore[no-any-return]


def request_parts(request: pb.ScoreRewardsRequest) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The spec mapping and rollout mappings of a request message."""
    spec = struct_to_dict(request.spec) if request.HasField("spec") else {}
    return spec, [struct_to_dict(r) for r in request.rollouts]


def results_message(results: Sequence[RewardResult]) -> pb.ScoreRewardsResponse:
    """The response message of the gRPC and Connect protocols."""
    response = pb.ScoreRewardsResponse()
    for index, result in enumerate(results):
        item = response.results.add(index=index, status=result.status)
        if result.total is not None:
            item.total = result.total
        for name, score in result.components.items():
            component = item.components[name]
            component.status = score.status
            if score.reason is not None:
                component.reason = score.reason
            _set_value(component.value, score.value)
    return response


def _set_value(target: struct_pb2.Value, value: float | bool | None) -> None:
    if value is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        target.bool_value = value
    else:
        target.number_value = float(value)
