"""An undecodable gRPC message is the caller's error on every service: ``invalid_argument`` naming the message."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from tests.server.harness import ServerProcess, make_token, write_config

NOT_PROTOBUF = b"\xff\xff\xff\xff"
"""A field tag with no end: no protobuf message decodes from it."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    directory = tmp_path_factory.mktemp("grpc-decoding")
    config = write_config(directory, {"database": {"url": "sqlite:///server.db"}})
    token = make_token(f"sqlite:///{directory / 'server.db'}", "alpha", ["evaluations.run", "evaluators.write"])
    with ServerProcess(config) as process:
        yield process, token


@pytest.mark.parametrize(
    ("method", "named"),
    [
        ("RewardService/ScoreRewards", "ScoreRewardsRequest"),
        ("RunService/GetRun", "GetRunRequest"),
        ("EvaluatorService/ListEvaluators", "ListEvaluatorsRequest"),
        ("DatasetService/GetDataset", "GetDatasetRequest"),
        ("EvaluationJobService/CreateEvaluationJob", "CreateEvaluationJobRequest"),
    ],
)
def test_an_undecodable_message_is_invalid_argument_naming_its_type(
    server: tuple[ServerProcess, str], method: str, named: str
) -> None:
    process, token = server
    with grpc.insecure_channel(process.grpc) as channel:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            f"/evalsi.v1alpha1.{method}", request_serializer=lambda raw: raw, response_deserializer=lambda raw: raw
        )
        with pytest.raises(grpc.RpcError) as refused:
            call(NOT_PROTOBUF, metadata=(("authorization", f"Bearer {token}"),), timeout=120)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert named in str(refused.value.details())
