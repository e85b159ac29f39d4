"""Translation between the protobuf messages, plain JSON data and the library's results.

``google.protobuf.Struct`` carries every number as a double; integral numbers are turned back into ints, so a
rollout's ``completion_tokens: 12`` reaches the records (and the cache keys) as it does over HTTP JSON.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from evalsi.rewards import RewardResult
from evalsi.server._errors import ServiceError
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


def message_dict(message: Message, where: str) -> dict[str, Any]:
    """A message (a Struct, say) as its JSON form; a number JSON cannot hold is the caller's error.

    A protobuf double may be infinite or NaN, which no JSON number is (and no spec, rollout or result holds).

    Raises:
        ServiceError: ``invalid_argument`` naming ``where``.

    """
    try:
        result: dict[str, Any] = json_format.MessageToDict(message)
    except ValueError:
        raise ServiceError(
            "invalid_argument", f"{where}: holds a number that is infinite or NaN; numbers must be finite", path=where
        ) from None
    return result


def struct_to_dict(struct: struct_pb2.Struct, where: str = "request") -> dict[str, Any]:
    """A Struct as a plain dict (integral numbers as ints).

    Raises:
        ServiceError: ``invalid_argument`` naming ``where`` for a number that is not finite.

    """
    return plain_numbers(message_dict(struct, where))  # type: ignore[no-any-return]


def request_parts(request: pb.ScoreRewardsRequest) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The spec mapping and rollout mappings of a request message.

    Raises:
        ServiceError: ``invalid_argument`` for a number that is not finite, naming the spec or the rollout.

    """
    spec = struct_to_dict(request.spec, "spec") if request.HasField("spec") else {}
    return spec, [struct_to_dict(r, f"rollouts[{index}]") for index, r in enumerate(request.rollouts)]


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
