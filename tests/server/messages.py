"""Building gRPC/Connect request messages and reading response messages as plain JSON, for tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format

from evalsi.server._proto.evalsi.v1alpha1 import rewards_pb2 as pb


def request_message(spec: dict[str, Any], rollouts: Sequence[dict[str, Any]]) -> pb.ScoreRewardsRequest:
    """A request message from plain data."""
    message = pb.ScoreRewardsRequest()
    message.spec.update(spec)
    for rollout in rollouts:
        message.rollouts.add().update(rollout)
    return message


def message_to_json(response: pb.ScoreRewardsResponse) -> dict[str, Any]:
    """A response message as the HTTP JSON body would carry it (index and nulls always present)."""
    out = []
    for item in response.results:
        components = {}
        for name, c in item.components.items():
            raw = json_format.MessageToDict(c.value) if c.HasField("value") else None
            components[name] = {
                "value": raw,
                "status": c.status,
                "reason": c.reason if c.HasField("reason") else None,
            }
        out.append(
            {
                "index": item.index,
                "total": item.total if item.HasField("total") else None,
                "status": item.status,
                "components": components,
            }
        )
    return {"results": out}
